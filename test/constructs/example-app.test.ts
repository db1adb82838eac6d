/**
 * The example app (`bin/example-app.ts`, what `cdk synth` runs): synthesized once, with CDK's
 * built-in CloudFormation validation on, then checked against the "done" list of the construct
 * library and compared with the committed snapshot (asset hashes normalised).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { buildExampleApp } from '../../bin/example-app.ts';
import { CdcSource, ChangeLog } from '../../lib/index.ts';
import { parseJsonProperty, policyDocuments, resourcesOf } from './helpers.ts';

let outdir: string;
let template: Template;
let json: { Resources: Record<string, { Type: string; Properties: Record<string, unknown> }> };
let sources: CdcSource[];
let log: ChangeLog;

beforeAll(() => {
  outdir = fs.mkdtempSync(path.join(os.tmpdir(), 'cdc-example-'));
  const { app, stack } = buildExampleApp(new App({ outdir }));
  app.synth();
  json = JSON.parse(fs.readFileSync(path.join(outdir, `${stack.artifactId}.template.json`), 'utf8'));
  template = Template.fromJSON(json);
  sources = stack.node.findAll().filter((c): c is CdcSource => c instanceof CdcSource);
  log = stack.node.findAll().find((c): c is ChangeLog => c instanceof ChangeLog)!;
});

afterAll(() => {
  fs.rmSync(outdir, { recursive: true, force: true });
});

/** Replaces what differs between machines or builds: asset hashes. */
function normalise(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value).replace(/[0-9a-f]{64}/g, '[ASSET-HASH]'));
}

describe('example app', () => {
  test('CloudFormation validation reports nothing unacknowledged', () => {
    const report = JSON.parse(fs.readFileSync(path.join(outdir, 'validation-report.json'), 'utf8')) as { pluginReports: Array<{ pluginName: string; violations: unknown[] }> };
    for (const plugin of report.pluginReports) expect(plugin.violations, plugin.pluginName).toEqual([]);
  });

  test('every masked column has a masking rule and every excluded column a remove-column rule', () => {
    expect(sources.map((s) => s.sourceId).sort()).toEqual(['billing', 'orders']);
    const tasks = resourcesOf(template, 'AWS::DMS::ReplicationTask');
    expect(tasks).toHaveLength(2);
    let masked = 0;
    let excluded = 0;
    for (const source of sources) {
      const [, task] = tasks.find(([id]) => id.startsWith(source.node.id))!;
      const rules = (parseJsonProperty(task.Properties.TableMappings) as { rules: Array<Record<string, unknown>> }).rules;
      const has = (action: string, schema: string, table: string, column: string): boolean =>
        rules.some((r) => r['rule-action'] === action && JSON.stringify(r['object-locator']) === JSON.stringify({ 'schema-name': schema, 'table-name': table, 'column-name': column }));
      for (const t of source.tables.filter((x) => x.pattern === undefined)) {
        for (const c of t.mask) {
          expect(has('data-masking-hash-mask', t.schemaName, t.tableName, c), `${source.sourceId} ${t.tableId}.${c} masked`).toBe(true);
          masked++;
        }
        for (const c of t.exclude) {
          expect(has('remove-column', t.schemaName, t.tableName, c), `${source.sourceId} ${t.tableId}.${c} removed`).toBe(true);
          excluded++;
        }
        expect(rules.some((r) => r['rule-type'] === 'selection' && JSON.stringify(r['object-locator']) === JSON.stringify({ 'schema-name': t.schemaName, 'table-name': t.tableName }))).toBe(true);
      }
      expect(rules.some((r) => r['rule-type'] === 'selection' && (r['object-locator'] as Record<string, string>)['table-name'] === 'cdc_heartbeat')).toBe(true);
    }
    // The orders source captures the rest of its schema by pattern, with explicit exclusions (docs/onboarding.md).
    const [, orders] = tasks.find(([id]) => id.startsWith('Orders'))!;
    const selections = (parseJsonProperty(orders.Properties.TableMappings) as { rules: Array<Record<string, unknown>> }).rules.filter((r) => r['rule-type'] === 'selection');
    expect(selections.map((r) => [(r['object-locator'] as Record<string, string>)['table-name'], r['rule-action']])).toEqual([
      ['customers', 'include'],
      ['orders', 'include'],
      ['order_items', 'include'],
      ['%', 'include'],
      ['audit[_]%', 'exclude'],
      ['schema[_]migrations', 'exclude'],
      ['cdc_heartbeat', 'include'],
    ]);
    expect(masked).toBe(3);
    expect(excluded).toBe(3);
    expect(sources.some((s) => s.tables.some((t) => t.deletes === 'hard'))).toBe(true);
  });

  test('every Kinesis stream is KMS-encrypted', () => {
    const streams = resourcesOf(template, 'AWS::Kinesis::Stream');
    expect(streams).toHaveLength(3);
    for (const [id, s] of streams) expect((s.Properties.StreamEncryption as { EncryptionType: string } | undefined)?.EncryptionType, id).toBe('KMS');
  });

  test('Firehose delivers to an S3 bucket whose lifecycle expires at archiveRetention', () => {
    const [, delivery] = resourcesOf(template, 'AWS::KinesisFirehose::DeliveryStream')[0]!;
    const bucketArn = (delivery.Properties.ExtendedS3DestinationConfiguration as { BucketARN: { 'Fn::GetAtt': [string, string] } }).BucketARN;
    const bucket = json.Resources[bucketArn['Fn::GetAtt'][0]]!;
    expect(bucket.Type).toBe('AWS::S3::Bucket');
    const rules = (bucket.Properties.LifecycleConfiguration as { Rules: Array<{ ExpirationInDays?: number; Status: string }> }).Rules;
    expect(rules.filter((r) => r.ExpirationInDays !== undefined).map((r) => r.ExpirationInDays)).toEqual([log.archiveRetention.toDays()]);
    expect(log.archiveRetention.toDays()).toBe(395);
  });

  test('DynamoDB has point-in-time recovery', () => {
    const tables = resourcesOf(template, 'AWS::DynamoDB::Table');
    expect(tables).toHaveLength(1);
    expect(tables[0]![1].Properties.PointInTimeRecoverySpecification).toEqual({ PointInTimeRecoveryEnabled: true });
  });

  test('every event source mapping reports batch item failures, bisects and has an on-failure destination', () => {
    const mappings = resourcesOf(template, 'AWS::Lambda::EventSourceMapping');
    // Two normalizers, the warehouse applier, the search applier and the change log's archive copier.
    expect(mappings).toHaveLength(5);
    expect(mappings.filter(([id]) => id.startsWith('LogArchiveCopier'))).toHaveLength(1);
    expect(mappings.filter(([id]) => id.startsWith('SearchApplier'))).toHaveLength(1);
    for (const [id, m] of mappings) {
      expect(m.Properties.FunctionResponseTypes, id).toEqual(['ReportBatchItemFailures']);
      expect(m.Properties.BisectBatchOnFunctionError, id).toBe(true);
      expect((m.Properties.DestinationConfig as { OnFailure?: { Destination?: unknown } } | undefined)?.OnFailure?.Destination, id).toBeDefined();
      // Outages delay, they never skip: no retry or record-age limit on any mapping.
      expect(m.Properties.MaximumRetryAttempts, id).toBe(-1);
      expect(m.Properties.MaximumRecordAgeInSeconds, id).toBe(-1);
    }
  });

  test('the search sink: its applier, its own mapping on the change log, and its alarms', () => {
    const fn = resourcesOf(template, 'AWS::Lambda::Function').filter(([id]) => id.startsWith('SearchApplier'));
    expect(fn).toHaveLength(1);
    const [, mapping] = resourcesOf(template, 'AWS::Lambda::EventSourceMapping').find(([id]) => id.startsWith('SearchApplier'))!;
    expect(mapping.Properties.FunctionName).toEqual({ Ref: fn[0]![0] });
    const searchAlarms = resourcesOf(template, 'AWS::CloudWatch::Alarm').filter(([id]) => id.startsWith('Search'));
    expect(searchAlarms.map(([, a]) => a.Properties.MetricName).sort()).toEqual(['ApplyErrors', 'ApproximateNumberOfMessagesVisible', 'DeadLetters', 'EndToEndLag', 'IteratorAge']);
  });

  test('alarms of the four required kinds exist: end-to-end lag, dead letters and apply errors, iterator age, DMS CDC latency', () => {
    const kinds = new Set(resourcesOf(template, 'AWS::CloudWatch::Alarm').map(([, a]) => `${a.Properties.Namespace}/${a.Properties.MetricName}`));
    for (const kind of ['CdcPlatform/EndToEndLag', 'CdcPlatform/DeadLetters', 'CdcPlatform/ApplyErrors', 'AWS/Lambda/IteratorAge', 'AWS/DMS/CDCLatencySource', 'AWS/DMS/CDCLatencyTarget']) {
      expect(kinds, kind).toContain(kind);
    }
    // Every alarm notifies the topic on ALARM and OK.
    for (const [id, a] of resourcesOf(template, 'AWS::CloudWatch::Alarm')) {
      expect(a.Properties.AlarmActions, id).toEqual([{ Ref: expect.stringMatching(/^Alarms/) }]);
      expect(a.Properties.OKActions, id).toEqual([{ Ref: expect.stringMatching(/^Alarms/) }]);
    }
  });

  test('no policy statement allows the action "*"', () => {
    const docs = policyDocuments(template);
    expect(docs.length).toBeGreaterThan(20);
    for (const { where, doc } of docs) {
      for (const statement of doc.Statement) {
        const actions = ([] as unknown[]).concat(statement.Action ?? [], statement.NotAction ?? []);
        expect(actions, `${where}: ${JSON.stringify(statement).slice(0, 200)}`).not.toContain('*');
        expect(statement.NotAction, where).toBeUndefined();
      }
    }
  });

  test('matches the committed snapshot (asset hashes normalised)', async () => {
    await expect(`${JSON.stringify(normalise(json), null, 1)}\n`).toMatchFileSnapshot('./__snapshots__/example-app.template.json');
  });
});
