/**
 * What the end-to-end tests print when a verdict does not match (test/helpers/verdict-diagnostics.ts):
 * the audit log, the sink's rows and min/max position per table, and the processes behind each
 * port, read from a real stack while it runs and from its state folder once it stopped.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { startLocalStack, type LocalStack } from '../../local/stack.ts';
import { stackPorts, stateDirDiagnostics, verdictDiagnostics } from '../helpers/verdict-diagnostics.ts';

let cluster: PostgresCluster;
let dir: string;
let stack: LocalStack | null = null;

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-diag-'));
  cluster = await startPostgres({ fast: true });
  await cluster.createDatabase('src');
  await cluster.createDatabase('dw');
}, 120_000);

afterAll(async () => {
  await stack?.stop().catch(() => undefined);
  await cluster?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
}, 120_000);

describe('verdict diagnostics', () => {
  it('print the audit log, the sink positions per table and the pids behind the ports, running and stopped', async () => {
    const stateDir = path.join(dir, 'state');
    stack = await startLocalStack({ stateDir, source: 'demo', sourceUrl: cluster.url('src'), warehouseUrl: cluster.url('dw') });
    await stack.controlPlane.appendAudit({
      at: new Date().toISOString(),
      actor: 'tester',
      action: 'pause',
      source: 'demo',
      table: 'public.t',
      outcome: 'done',
      detail: { why: 'diagnostics' },
    });
    await stack.controlPlane.appendAudit({
      at: new Date().toISOString(),
      actor: 'tester',
      action: 'pause',
      source: 'other',
      table: 'public.t',
      outcome: 'done',
      detail: { why: 'not this source' },
    });
    const dw = new pg.Client({ connectionString: cluster.url('dw') });
    await dw.connect();
    await dw.query(
      "CREATE SCHEMA demo_public; CREATE TABLE demo_public._cdc_mirror_t (id int, _cdc_position varchar(24)); INSERT INTO demo_public._cdc_mirror_t VALUES (1, '000000000000000000000a07'), (2, '0000000000000000000001f3')",
    );
    await dw.end();

    const lines = await verdictDiagnostics({
      controlPlane: stack.controlPlane,
      warehouseUrl: cluster.url('dw'),
      source: 'demo',
      tables: ['public.t', 'public.none'],
      ports: stackPorts(stack, { warehouse: cluster.port }),
    });
    const text = lines.join('\n');
    expect(text).toContain('--- audit log of demo: 1 entries');
    expect(text).toMatch(/ tester pause public\.t done \{"why":"diagnostics"\}/);
    expect(text).not.toContain('not this source');
    expect(lines).toContain('  public.t mirror: 2 rows, position 0000000000000000000001f3 .. 000000000000000000000a07');
    expect(lines).toContain('  public.t delta: none');
    expect(lines).toContain('  public.none mirror: none');
    expect(text).toMatch(new RegExp(`stack dynamodb port ${stack.dynamodb.port}: pid ${stack.dynamodb.pid} \\(.*DynamoDBLocal\\.jar`));
    expect(text).toMatch(new RegExp(`stack kinesalite port ${stack.kinesalite.port}: pid ${stack.kinesalite.pid} \\(`));
    expect(text).toMatch(new RegExp(`warehouse port ${cluster.port}: pid \\d+ \\(.*postgres`));

    // Once the run is over: the control plane from the state folder's data, the ports free.
    const { dynamodb, kinesalite } = stack;
    await stack.stop();
    stack = null;
    const after = (await stateDirDiagnostics(stateDir, { source: 'demo', warehouseUrl: cluster.url('dw') })).join('\n');
    expect(after).toMatch(/ tester pause public\.t done \{"why":"diagnostics"\}/);
    expect(after).toContain(`dynamodb (state.json) port ${dynamodb.port}: nothing listening`);
    expect(after).toContain(`kinesalite (state.json) port ${kinesalite.port}: nothing listening`);
  }, 180_000);
});
