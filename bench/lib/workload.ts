/**
 * The end-to-end benchmark's write load, run in its own process (`fork`) so that the pipeline's
 * work in the benchmark's process cannot slow the load generator's event loop: transactions of
 * `txSize` changes (70 % updates, 20 % inserts, 10 % deletes; ~120-byte rows) on one connection,
 * paced to `rate` changes/s (catching up when behind), or unthrottled when `rate` is 0.
 *
 * Started by `runWorkload()`; as a child it reads its options from argv and reports its figures
 * to the parent over IPC when it receives `stop` (or its time is up).
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { seededRandom } from './history.ts';
import { percentile, sleep } from './report.ts';

export interface WorkloadOptions {
  url: string;
  table: string;
  /** Changes per second; 0 = as fast as one connection can commit. */
  rate: number;
  txSize: number;
  seed: number;
  /** Ids 1..initialIds exist when the load starts. */
  initialIds: number;
  /** Instead of 1..initialIds: the ids that exist, and the first id not used yet (a load after another one on the same table). */
  liveIds?: { ids: number[]; next: number };
  seconds: number;
}

export interface WorkloadReport {
  seconds: number;
  transactions: number;
  changes: number;
  changesPerSecond: number;
  commitMs: { p50: number; p99: number; max: number };
}

/** The statements of one transaction at a time, over a seeded key space. */
export class ChangeMaker {
  private readonly live: number[] = [];
  private next: number;
  private readonly rand: () => number;

  constructor(
    private readonly table: string,
    seed: number,
    initialIds: number,
    liveIds?: { ids: number[]; next: number },
  ) {
    this.rand = seededRandom(seed);
    if (liveIds) {
      this.live.push(...liveIds.ids);
      this.next = liveIds.next;
    } else {
      for (let i = 1; i <= initialIds; i++) this.live.push(i);
      this.next = initialIds + 1;
    }
  }

  /** One change as SQL text (values are numbers and hex strings made here; nothing from outside). */
  statement(): string {
    const r = this.rand();
    const note = `'${Math.floor(this.rand() * 0xffffffff)
      .toString(16)
      .padStart(8, '0')
      .repeat(8)}'`;
    const amount = (this.rand() * 1000).toFixed(2);
    if (r < 0.2 || this.live.length < 100) {
      const id = this.next++;
      this.live.push(id);
      return `INSERT INTO ${this.table} (id, customer_id, status, amount, note) VALUES (${id}, ${1 + Math.floor(this.rand() * 100_000)}, 'placed', ${amount}, ${note})`;
    }
    const i = Math.floor(this.rand() * this.live.length);
    const id = this.live[i]!;
    if (r < 0.3) {
      this.live[i] = this.live[this.live.length - 1]!;
      this.live.pop();
      return `DELETE FROM ${this.table} WHERE id = ${id}`;
    }
    return `UPDATE ${this.table} SET status = 'paid', amount = ${amount}, note = ${note}, updated_at = now() WHERE id = ${id}`;
  }

  transaction(size: number): string {
    const parts = ['BEGIN'];
    for (let i = 0; i < size; i++) parts.push(this.statement());
    parts.push('COMMIT');
    return parts.join('; ');
  }
}

/** Runs the load in this process until `stopped()` says so or the time is up. */
export async function generateLoad(o: WorkloadOptions, stopped: () => boolean): Promise<WorkloadReport> {
  const client = new pg.Client({ connectionString: o.url, application_name: 'cdc-bench-workload' });
  await client.connect();
  const maker = new ChangeMaker(o.table, o.seed, o.initialIds, o.liveIds);
  const commitMs: number[] = [];
  let transactions = 0;
  const interval = o.rate > 0 ? (1000 * o.txSize) / o.rate : 0;
  const t0 = performance.now();
  const end = t0 + o.seconds * 1000;
  let due = t0;
  try {
    while (!stopped() && performance.now() < end) {
      const sql = maker.transaction(o.txSize);
      const c0 = performance.now();
      await client.query(sql);
      commitMs.push(performance.now() - c0);
      transactions++;
      if (interval > 0) {
        due += interval;
        const wait = due - performance.now();
        if (wait > 1) await sleep(wait);
      }
    }
  } finally {
    await client.end().catch(() => undefined);
  }
  const seconds = (performance.now() - t0) / 1000;
  return {
    seconds,
    transactions,
    changes: transactions * o.txSize,
    changesPerSecond: (transactions * o.txSize) / seconds,
    commitMs: { p50: percentile(commitMs, 50), p99: percentile(commitMs, 99), max: Math.max(0, ...commitMs) },
  };
}

/** Runs the load in a child process; resolves with its report when it ends. */
export function runWorkload(o: WorkloadOptions): { done: Promise<WorkloadReport>; stop(): void } {
  // The options go over IPC: a list of live ids can exceed the size limit of one argument.
  const child = fork(fileURLToPath(import.meta.url), [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  child.send({ options: o });
  const done = new Promise<WorkloadReport>((resolve, reject) => {
    let report: WorkloadReport | null = null;
    child.on('message', (m) => {
      const msg = m as { report?: WorkloadReport; error?: string };
      if (msg.report) report = msg.report;
      if (msg.error) reject(new Error(`workload: ${msg.error}`));
    });
    child.on('exit', (code) => (report ? resolve(report) : reject(new Error(`workload process exited with ${code} and no report`))));
  });
  return { done, stop: () => void child.send('stop') };
}

// As a child process: run, report, exit.
if (process.send && process.argv[1] === fileURLToPath(import.meta.url)) {
  let stop = false;
  process.on('message', (m) => {
    if (m === 'stop') stop = true;
    const o = (m as { options?: WorkloadOptions } | null)?.options;
    if (!o) return;
    generateLoad(o, () => stop).then(
      (report) => process.send!({ report }, () => process.exit(0)),
      (err: unknown) => process.send!({ error: err instanceof Error ? err.message : String(err) }, () => process.exit(1)),
    );
  });
}
