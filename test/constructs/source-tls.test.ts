/**
 * TLS to the source on every function that connects to it (docs/deploy.md, "TLS to the source"):
 * every Lambda function in the template that is given a source secret — named in its environment
 * or readable by its role — carries the source's TLS settings (`CDC_SOURCE_SSL_MODE`, and
 * `CDC_SOURCE_CA_PEM` when the deployment names a CA), in a stack with every such function (task
 * lifecycle, heartbeat writer, slot monitor with its own secret, snapshot and poll workers with a
 * read replica, reconciler) and in the example app.
 */
import { App, Duration, Stack, Token } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { describe, expect, test } from 'vitest';
import { buildExampleApp } from '../../bin/example-app.ts';
import { CapturedTable, CaptureMode, CdcSource, Reconciler, SourceDatabase, SslMode, WarehouseConnection, WarehouseSink } from '../../lib/index.ts';
import { DATABASE_PEER, fixture, newApp, ordersSource, resourcesOf, WAREHOUSE_PEER } from './helpers.ts';

const PEM = '-----BEGIN CERTIFICATE-----\nMIIBprivateca\n-----END CERTIFICATE-----\n';

type Statement = { Effect: string; Action: string | string[]; Resource?: unknown };

/** The source secrets of every `CdcSource` in a stack, as the text that names them in a template (`:secret:<name>`). */
function sourceSecretMarkers(stack: Stack): string[] {
  const secrets = stack.node
    .findAll()
    .filter((c): c is CdcSource => c instanceof CdcSource)
    .flatMap((s) => [
      s.database.secret,
      s.database.heartbeatSecret,
      s.database.monitoringSecret,
      ...(s.database.readReplicaSecret ? [s.database.readReplicaSecret] : []),
    ]);
  const names = secrets.map((s) => s.secretName);
  for (const n of names) expect(Token.isUnresolved(n), 'the secrets of these tests are imported by name').toBe(false);
  return [...new Set(names)].map((n) => `:secret:${n}`);
}

/** Whether a piece of template names one of the secrets (the whole name: followed by the end of a string or by a policy's `-??????`). */
function names(value: unknown, markers: string[]): boolean {
  const text = JSON.stringify(value ?? null);
  return markers.some((m) => text.includes(`${m}"`) || text.includes(`${m}-??????`));
}

/** Logical id → environment of every function given a source secret (in its environment, or a secretsmanager read its role may do). */
function functionsGivenSourceSecret(t: Template, markers: string[]): Map<string, Record<string, unknown>> {
  const out = new Map<string, Record<string, unknown>>();
  const policies = resourcesOf(t, 'AWS::IAM::Policy');
  for (const [id, fn] of resourcesOf(t, 'AWS::Lambda::Function')) {
    const env = ((fn.Properties.Environment as { Variables?: Record<string, unknown> } | undefined)?.Variables ?? {}) as Record<string, unknown>;
    const role = (fn.Properties.Role as { 'Fn::GetAtt'?: [string, string] })['Fn::GetAtt']?.[0];
    const statements = policies
      .filter(([, p]) => ((p.Properties.Roles as Array<{ Ref: string }> | undefined) ?? []).some((r) => r.Ref === role))
      .flatMap(([, p]) => (p.Properties.PolicyDocument as { Statement: Statement[] }).Statement);
    const reads = statements.some((s) => s.Effect === 'Allow' && [s.Action].flat().some((a) => a.startsWith('secretsmanager:')) && names(s.Resource, markers));
    if (reads || names(env, markers)) out.set(id, env);
  }
  return out;
}

/** A stack with every kind of function that connects to the source. */
function everySourceFunction(database: (f: ReturnType<typeof fixture>) => SourceDatabase): { stack: Stack; t: Template } {
  const f = fixture();
  const orders = ordersSource(f, {
    database: database(f),
    tables: [
      CapturedTable.of('public.orders'),
      CapturedTable.of('public.legacy_orders', { capture: CaptureMode.POLL, pollColumn: 'updated_at', primaryKey: ['order_no'] }),
    ],
  });
  const warehouse = new WarehouseSink(f.stack, 'Warehouse', {
    controlPlane: f.controlPlane,
    changeLog: f.log,
    sources: [orders],
    vpc: f.vpc,
    connection: WarehouseConnection.postgres({ secret: f.warehouseSecret, peer: WAREHOUSE_PEER }),
    freshnessTarget: Duration.minutes(2),
  });
  new Reconciler(f.stack, 'Reconciler', { controlPlane: f.controlPlane, sources: [orders], sinks: [warehouse], vpc: f.vpc });
  return { stack: f.stack, t: Template.fromStack(f.stack) };
}

const EVERY_KIND = ['OrdersHeartbeatWriter', 'OrdersPollWorker', 'OrdersSlotMonitor', 'OrdersSnapshotWorker', 'OrdersTaskLifecycle', 'ReconcilerFunction'];

function kinds(ids: Iterable<string>): string[] {
  return [...ids].map((id) => EVERY_KIND.find((k) => id.startsWith(k)) ?? id).sort();
}

describe('TLS to the source on every function given a source secret', () => {
  test('a private CA: every such function gets verify-full and the CA bundle', () => {
    const { stack, t } = everySourceFunction((f) =>
      SourceDatabase.postgres({
        databaseName: 'orders',
        secret: f.sourceSecret,
        heartbeatSecret: f.heartbeatSecret,
        caCertificatePem: PEM,
        monitoringSecret: secretsmanager.Secret.fromSecretNameV2(f.stack, 'MonitorSecret', 'monitor'),
        readReplicaSecret: secretsmanager.Secret.fromSecretNameV2(f.stack, 'ReplicaSecret', 'replica'),
        peer: DATABASE_PEER,
      }),
    );
    const markers = sourceSecretMarkers(stack);
    expect(markers.sort()).toEqual([':secret:heartbeat', ':secret:monitor', ':secret:replica', ':secret:source']);
    const found = functionsGivenSourceSecret(t, markers);
    // Not vacuous: each kind of function that connects to the source is found (and nothing else, e.g. the applier).
    expect(kinds(found.keys())).toEqual(EVERY_KIND);
    for (const [id, env] of found) expect(env, id).toMatchObject({ CDC_SOURCE_SSL_MODE: 'verify-full', CDC_SOURCE_CA_PEM: PEM });
  });

  test('the explicit opt-out: every such function gets require and no CA bundle', () => {
    const { stack, t } = everySourceFunction((f) =>
      SourceDatabase.postgres({
        databaseName: 'orders',
        secret: f.sourceSecret,
        heartbeatSecret: f.heartbeatSecret,
        sslMode: SslMode.REQUIRE,
        peer: DATABASE_PEER,
      }),
    );
    const found = functionsGivenSourceSecret(t, sourceSecretMarkers(stack));
    expect(kinds(found.keys())).toEqual(EVERY_KIND);
    for (const [id, env] of found) {
      expect(env.CDC_SOURCE_SSL_MODE, id).toBe('require');
      expect(env.CDC_SOURCE_CA_PEM, id).toBeUndefined();
    }
  });

  test('the example app: in every stage, every function given a source secret gets verify-full', () => {
    const { stages } = buildExampleApp(newApp() as App);
    for (const stage of Object.values(stages)) {
      const stack = stage.pipeline;
      const t = Template.fromStack(stack);
      const found = functionsGivenSourceSecret(t, sourceSecretMarkers(stack));
      // Two sources, each with its lifecycle, heartbeat writer, slot monitor and snapshot worker at least.
      expect(found.size, stage.stageName).toBeGreaterThanOrEqual(8);
      for (const [id, env] of found) expect(env.CDC_SOURCE_SSL_MODE, `${stage.stageName} ${id}`).toBe('verify-full');
    }
  });
});
