/**
 * AWS's own template rules over what users deploy: the CloudFormation Guard policy-validation
 * plugin (`@cdklabs/cdk-validator-cfnguard`, the AWS Control Tower proactive controls, run by its
 * bundled `cfn-guard` binary, offline) over every stack of the example app (both stages and the
 * DMS service roles) and over the README's `PipelineStack`. A finding fails the test unless the
 * table in docs/deploy.md, "CloudFormation Guard: the rules suppressed", names its control and
 * resource with a reason; a row that suppresses nothing fails too, so the table never outlives a fix.
 * A finding on a template as a whole (no resource) passes only where its control is suppressed
 * for a resource of that template.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { App, Stack, type PolicyViolationBeta1 } from 'aws-cdk-lib';
import { CfnGuardValidator } from '@cdklabs/cdk-validator-cfnguard';
import { afterAll, expect, test } from 'vitest';
import { buildExampleApp } from '../../bin/example-app.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const HEADING = '### CloudFormation Guard: the rules suppressed';
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cdc-guard-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

/** One row of the table: a control, the logical ids it is suppressed for, and why. */
export interface Suppression {
  readonly control: string;
  readonly resources: RegExp;
  readonly reason: string;
}

/** The rows of the table under `HEADING` in docs/deploy.md: | `CT.X.PR.N` | `regexp of logical ids` | reason |, a `|` in a cell written `\|`. */
export function suppressions(markdown: string): Suppression[] {
  const start = markdown.indexOf(`\n${HEADING}\n`);
  if (start < 0) throw new Error(`docs/deploy.md has no section "${HEADING.slice(4)}"`);
  const section = markdown.slice(start + HEADING.length + 2).split(/\n#{2,3} /)[0]!;
  const rows = section.split('\n').filter((l) => l.startsWith('| `CT.'));
  return rows.map((row) => {
    // A `|` inside a cell is written `\|` (a table cell cannot hold a bare one).
    const cells = row
      .replaceAll('\\|', '\u0000')
      .replace(/^\|\s*|\s*\|$/g, '')
      .split(/\s+\|\s+/)
      .map((c) => c.replaceAll('\u0000', '|').trim());
    const [control, resources, reason] = [cells[0]!.replace(/`/g, ''), cells[1]!.replace(/^`|`$/g, ''), cells.slice(2).join(' | ')];
    if (cells.length < 3 || reason.length < 40)
      throw new Error(`the suppression table of docs/deploy.md: a row needs a control, resources and a reason: ${row}`);
    return { control, resources: new RegExp(`^(${resources})$`), reason };
  });
}

/** The control id of a finding: `[CT.S3.PR.2]: Require …` → `CT.S3.PR.2`. */
function controlOf(v: PolicyViolationBeta1): string {
  return /^\[(CT\.[A-Z0-9.]+)\]/.exec(v.description)?.[1] ?? v.ruleName;
}

/** The README's complete stack, as an app imports it (the package name mapped onto the repository's sources). */
async function readmeStack(app: App): Promise<Stack> {
  const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const block = [...readme.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m) => m[1]!).find((code) => /export class PipelineStack extends Stack\b/.test(code));
  if (!block) throw new Error('README.md has no ```ts block with `export class PipelineStack extends Stack`');
  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ type: 'module' }));
  fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'), 'dir');
  const file = path.join(dir, 'pipeline-stack.ts');
  fs.writeFileSync(file, block.replaceAll("from 'cdc-platform'", `from '${pathToFileURL(path.join(ROOT, 'lib', 'index.ts')).href}'`));
  const { PipelineStack } = (await import(pathToFileURL(file).href)) as { PipelineStack: new (scope: App, id: string) => Stack };
  return new PipelineStack(app, 'PipelineStack');
}

test('the rows of the suppression table are read with their reasons', () => {
  const md = `intro\n${HEADING}\n\ntext\n\n| Control | Resources | Reason |\n|---|---|---|\n| \`CT.S3.PR.2\` | \`LogAccessLogs[0-9A-F]{8}\\|Other\` | the access-log bucket would log to itself, a loop of logs about logs |\n\n## Next\n| \`CT.X.PR.1\` | \`A\` | elsewhere |`;
  const rows = suppressions(md);
  expect(rows).toEqual([
    { control: 'CT.S3.PR.2', resources: /^(LogAccessLogs[0-9A-F]{8}|Other)$/, reason: 'the access-log bucket would log to itself, a loop of logs about logs' },
  ]);
  expect(rows[0]!.resources.test('LogAccessLogs2BAA7BD3')).toBe(true);
  expect(rows[0]!.resources.test('ControlLogAccessLogs2BAA7BD3')).toBe(false);
  expect(() => suppressions(md.replace('the access-log bucket would log to itself, a loop of logs about logs', 'none'))).toThrow(
    /a row needs a control, resources and a reason/,
  );
});

test('the example app and the README stack pass the Control Tower proactive controls, but for the suppressed rules', async () => {
  const app = new App({ outdir: path.join(dir, 'example.out'), builtinCloudFormationValidation: false });
  const { stages, dmsServiceRoles } = buildExampleApp(app);
  // The README's stack in an app of its own, as a user's: it has its own DmsServiceRoles.
  const readmeApp = new App({ outdir: path.join(dir, 'readme.out'), builtinCloudFormationValidation: false });
  await readmeStack(readmeApp);
  const templates = [app, readmeApp].flatMap((a) => a.synth().stacksRecursively.map((s) => s.templateFullPath));
  expect(templates.map((t) => path.basename(t)).sort()).toEqual(
    [stages.Dev.pipeline, stages.Prod.pipeline, ...dmsServiceRoles]
      .map((s) => `${s.artifactId}.template.json`)
      .concat('PipelineStack.template.json')
      .sort(),
  );

  const validator = new CfnGuardValidator();
  const started = Date.now();
  const report = validator.validate({ templatePaths: templates, appConstruct: app });
  const rows = suppressions(fs.readFileSync(path.join(ROOT, 'docs', 'deploy.md'), 'utf8'));
  const used = new Set<Suppression>();
  const unsuppressed: string[] = [];
  /** Controls suppressed per template: a finding of the template as a whole (no resource) echoes its resources' findings. */
  const suppressedIn = new Set<string>();
  const templateLevel: Array<{ key: string; text: string }> = [];
  let findings = 0;
  for (const v of report.violations) {
    for (const r of v.violatingResources) {
      findings++;
      const template = path.basename(r.templatePath);
      const text = `${controlOf(v)} ${template}:${r.resourceLogicalId ?? r.locations.join(',')}: ${v.description.split('\n')[0]} (fix: ${v.fix})`;
      if (r.resourceLogicalId === undefined) {
        templateLevel.push({ key: `${template} ${controlOf(v)}`, text });
        continue;
      }
      const row = rows.find((s) => s.control === controlOf(v) && s.resources.test(r.resourceLogicalId!));
      if (!row) unsuppressed.push(text);
      else {
        used.add(row);
        suppressedIn.add(`${template} ${controlOf(v)}`);
      }
    }
  }
  unsuppressed.push(...templateLevel.filter((f) => !suppressedIn.has(f.key)).map((f) => f.text));
  console.log(
    `cfn-guard ${validator.version}: ${validator.ruleIds?.length} controls over ${templates.length} templates in ${Date.now() - started} ms; ` +
      `${findings} findings, ${findings - unsuppressed.length} suppressed by ${used.size} rows of docs/deploy.md`,
  );
  expect(validator.ruleIds?.length).toBeGreaterThan(100);
  expect(unsuppressed).toEqual([]);
  expect(rows.filter((r) => !used.has(r)).map((r) => `${r.control} ${r.resources.source}`)).toEqual([]);
}, 600_000);
