/**
 * local/app-config.ts on small cloud assemblies written here: what a run takes from a template,
 * and the refusals that name the stack, the function and the variable (docs/local.md, "Your
 * synthesized app"). The example app's own assembly is read by test/e2e/local-app.test.ts.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { EnvName, ServiceName } from '../../contracts/env.ts';
import { loadLocalApp, withEnvironment } from '../../local/app-config.ts';
import { appPipelineOptions } from '../../bin/cli/local-app.ts';

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

type Env = Record<string, unknown>;

function fn(service: string, env: Env): { Type: string; Properties: Record<string, unknown> } {
  return { Type: 'AWS::Lambda::Function', Properties: { Environment: { Variables: { ...env, [EnvName.POWERTOOLS_SERVICE_NAME]: service } } } };
}

function mapping(fnId: string, stream: string, batchSize: number): { Type: string; Properties: Record<string, unknown> } {
  return {
    Type: 'AWS::Lambda::EventSourceMapping',
    Properties: { FunctionName: { Ref: fnId }, EventSourceArn: { 'Fn::GetAtt': [stream, 'Arn'] }, BatchSize: batchSize },
  };
}

const TABLES = JSON.stringify([
  { table: 'public.items', key: ['id'], deleteMode: 'hard', mask: ['email'], exclude: ['ssn'] },
  { table: 'public.cdc_heartbeat', key: ['source_id'], deleteMode: 'soft', mask: [], exclude: [] },
]);

/** A one-stack assembly: a source `shop` (normalizer, snapshot worker, slot monitor) and a warehouse sink; `change` edits the pieces. */
function assembly(change: { normalizer?: Env; applier?: Env; applierStream?: string; snapshot?: Env } = {}): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cdc-app-config-'));
  dirs.push(dir);
  const resources = {
    Raw: { Type: 'AWS::Kinesis::Stream' },
    Log: { Type: 'AWS::Kinesis::Stream' },
    Normalizer: fn(ServiceName.NORMALIZER, {
      [EnvName.SOURCE_ID]: 'shop',
      [EnvName.CONTROL_TABLE]: { Ref: 'Control' },
      [EnvName.CHANGE_LOG_STREAM]: { Ref: 'Log' },
      [EnvName.TABLE_CONFIG]: TABLES,
      [EnvName.HEARTBEAT_SCHEMA]: 'public',
      ...change.normalizer,
    }),
    NormalizerMapping: mapping('Normalizer', 'Raw', 500),
    Snapshot: fn('cdc-snapshot-worker', {
      [EnvName.SOURCE_ID]: 'shop',
      [EnvName.RAW_STREAM]: { Ref: 'Raw' },
      [EnvName.SNAPSHOT_BUDGET]: '{"writeLatencyPct":20,"cpuPct":7}',
      ...change.snapshot,
    }),
    Monitor: fn('cdc-slot-monitor', { [EnvName.SOURCE_ID]: 'shop', [EnvName.SLOT_NAME]: 'cdc_shop', [EnvName.SLOT_WAL_BUDGET_BYTES]: '2048' }),
    Applier: fn(ServiceName.WAREHOUSE_APPLIER, { [EnvName.SINK_ID]: 'dw', [EnvName.CHANGE_LOG_STREAM]: { Ref: 'Log' }, ...change.applier }),
    ApplierMapping: mapping('Applier', change.applierStream ?? 'Log', 700),
    Rebuild: fn(ServiceName.REBUILD_WORKER, { [EnvName.SINK_ID]: 'dw' }),
  };
  fs.writeFileSync(path.join(dir, 'Shop.template.json'), JSON.stringify({ Resources: resources }));
  fs.writeFileSync(
    path.join(dir, 'manifest.json'),
    JSON.stringify({
      artifacts: { ShopABC: { type: 'aws:cloudformation:stack', displayName: 'Team/Shop', properties: { templateFile: 'Shop.template.json' } } },
    }),
  );
  return dir;
}

describe('loadLocalApp', () => {
  test('takes the source, its tables, the sink, the slot, the budgets and the batch sizes from the template', () => {
    const c = loadLocalApp(assembly({ applier: { [EnvName.MERGE_MAX_ROWS]: '1000', [EnvName.MERGE_MAX_AGE_MS]: '30000' } }), null, null);
    expect(c.stack).toBe('Team/Shop');
    expect(c.source).toBe('shop');
    // The heartbeat table is the local pipeline's own.
    expect(c.tables).toEqual([{ table: 'public.items', key: ['id'], deleteMode: 'hard', mask: ['email'], exclude: ['ssn'] }]);
    expect(c.rules).toEqual([]);
    expect(c.catalogTypes).toBe(false);
    expect(c.changeLogAggregation).toBe(true);
    expect(c.slot).toBe('cdc_shop');
    expect(c.slotWalBudgetBytes).toBe(2048);
    expect(c.snapshotBudget).toEqual({ writeLatencyPct: 20, cpuPct: 7 });
    expect(c.warehouse.sinkId).toBe('dw');
    expect(c.warehouse.merge).toMatchObject({ maxRows: 1000, maxAgeMs: 30_000 });
    expect(c.search).toBeNull();
    expect(c.batchSizes).toEqual({ normalizer: 500, sink: 700, search: null, archive: null });
    expect(c.notRun).toEqual(['rebuild-worker']);
    // By name or artifact id.
    expect(loadLocalApp(assembly(), 'ShopABC', 'shop').stack).toBe('Team/Shop');
    expect(loadLocalApp(assembly({ normalizer: { [EnvName.CATALOG_TYPES]: 'published' } }), null, null).catalogTypes).toBe(true);
    // ChangeLog recordAggregation: false reaches the local normalizer.
    const plain = loadLocalApp(assembly({ normalizer: { [EnvName.CHANGE_LOG_AGGREGATION]: 'off' } }), null, null);
    expect(plain.changeLogAggregation).toBe(false);
    expect(appPipelineOptions(plain).changeLogAggregation).toBe(false);
  });

  test('refuses, naming stack, function and variable: a deploy-time value, a wrong table setting, another heartbeat schema', () => {
    expect(() => loadLocalApp(assembly({ normalizer: { [EnvName.TABLE_CONFIG]: { 'Fn::Join': ['', ['[', ']']] } } }), null, null)).toThrow(
      /Team\/Shop: function Normalizer \(normalizer\) CDC_TABLE_CONFIG is .*Fn::Join.*resolves at deploy time/,
    );
    // A misspelt field in the template's table settings is refused by the handlers' own parser.
    expect(() =>
      loadLocalApp(assembly({ normalizer: { [EnvName.TABLE_CONFIG]: JSON.stringify([{ table: 'public.items', masks: ['email'] }]) } }), null, null),
    ).toThrow(/CDC_TABLE_CONFIG\[0\]\.masks.*unknown field/);
    expect(() => loadLocalApp(assembly({ normalizer: { [EnvName.HEARTBEAT_SCHEMA]: 'ops' } }), null, null)).toThrow(
      /CDC_HEARTBEAT_SCHEMA is ops; cdc local writes its heartbeat in public/,
    );
    expect(() => loadLocalApp(assembly({ applier: { [EnvName.MERGE_MAX_ROWS]: 'many' } }), null, null)).toThrow(/CDC_MERGE_MAX_ROWS/);
  });

  test('refuses resources that do not fit together, and names what exists', () => {
    expect(() => loadLocalApp(assembly({ snapshot: { [EnvName.RAW_STREAM]: { Ref: 'Log' } } }), null, null)).toThrow(
      /function Snapshot \(snapshot-worker\) CDC_RAW_STREAM is not the stream the normalizer of shop reads \(Raw\)/,
    );
    expect(() => loadLocalApp(assembly({ applierStream: 'Raw' }), null, null)).toThrow(/stack Team\/Shop has no warehouse sink reading the change log/);
    expect(() => loadLocalApp(assembly(), 'Team/Other', null)).toThrow(/--stack Team\/Other: no such stack in .*; its stacks: Team\/Shop/);
    expect(() => loadLocalApp(assembly(), null, 'billing')).toThrow(/--source-id billing: stack Team\/Shop has no such source; its sources: shop/);
    expect(() => loadLocalApp(path.join(os.tmpdir(), 'no-such-cdk-out'), null, null)).toThrow(/is not a cloud assembly \(no manifest\.json\)/);
  });
});

test('withEnvironment sets the variables for the reader only and restores the process environment', () => {
  const name = 'CDC_APP_CONFIG_TEST_VARIABLE';
  process.env[name] = 'before';
  delete process.env.CDC_APP_CONFIG_TEST_UNSET;
  const seen = withEnvironment({ [name]: 'during', CDC_APP_CONFIG_TEST_UNSET: 'x' }, () => [process.env[name], process.env.CDC_APP_CONFIG_TEST_UNSET]);
  expect(seen).toEqual(['during', 'x']);
  expect(process.env[name]).toBe('before');
  expect('CDC_APP_CONFIG_TEST_UNSET' in process.env).toBe(false);
  expect(() =>
    withEnvironment({ [name]: 'during' }, () => {
      throw new Error('reader failed');
    }),
  ).toThrow('reader failed');
  expect(process.env[name]).toBe('before');
  delete process.env[name];
});
