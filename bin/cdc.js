#!/usr/bin/env node
// The `cdc` command. Subcommands live in bin/cli/. In the repository the CLI runs from its
// TypeScript sources, compiled on the fly by tsx (a devDependency); the published package has no
// sources and runs the bundle that `npm run build` writes to dist/cli/cdc.mjs.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

// The AWS SDK versions in package.json are pinned to releases that support Node 20; the SDK's
// warning that *later* releases will need Node 22 says nothing about them, and it would otherwise
// land on stderr of every command that loads a client (stderr is where `cdc decode` reports bad lines).
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

let main;
if (existsSync(fileURLToPath(new URL('./cli/main.ts', import.meta.url)))) {
  const { register } = await import('tsx/esm/api');
  register();
  ({ main } = await import('./cli/main.ts'));
} else {
  ({ main } = await import('../dist/cli/cdc.mjs'));
}
process.exitCode = await main(process.argv.slice(2));
