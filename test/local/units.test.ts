/** Pure parts of the local pipeline: status rendering, EMF collection, archive layout, CLI flags. */
import { describe, expect, it } from 'vitest';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { renderStatus, renderStatusLine, StatusWriter, formatMs, type StatusSnapshot } from '../../local/status.ts';
import { MetricsCollector, percentile, captureStdout } from '../../local/metrics.ts';
import { archiveKey, createArchiveCopier } from '../../lambda/core/rebuild/archive.ts';
import { FolderArchive } from '../../local/archive.ts';
import { parseDuration, parseLocalArgs } from '../../bin/cli/local-args.ts';
import { UsageError } from '../../bin/cli/command.ts';
import { documentBody } from '../../local/demo.ts';
import { seededRandom } from '../../local/seeded-random.ts';
import { toKinesisStreamEvent } from '../../lambda/adapters/kinesis-event.ts';

function snapshot(over: Partial<StatusSnapshot> = {}): StatusSnapshot {
  return {
    now: 200_000,
    startedAt: 100_000,
    source: 'demo',
    where: ['state     .cdc-local'],
    capture: { state: 'running', transactions: 10, records: 42, recordsPerSecond: 4.2, lastCommitLsn: '0/1A2B3C', slotRetainedBytes: 2048, error: null },
    workload: { transactions: 10, transactionsPerSecond: 1, errors: 0 },
    consumers: [{ consumer: 'normalizer', recordsPerSecond: 4.2, behindMs: 0, retries: 0, deadLetters: 0 }],
    sinks: [{ sink: 'warehouse', lagMs: 850, lagAt: 199_000, lagP50Ms: 700, lagP99Ms: 2400, eventsPerSecond: 4, deadLetters: 0 }],
    tables: [
      { table: 'public.customers', state: 'active', reason: null },
      { table: 'public.orders', state: 'needs-resnapshot', reason: 'HISTORY_GAP: slot gone' },
    ],
    deadLetters: 3,
    problems: [],
    hint: 'Ctrl-C to stop',
    ...over,
  };
}

describe('live status', () => {
  it('renders lag per sink, pollers, table states and dead letters', () => {
    const text = renderStatus(snapshot()).join('\n');
    expect(text).toContain('cdc local — source demo — up 1m40s');
    expect(text).toMatch(/warehouse\s+850 ms\s+700 ms\s+2\.4 s\s+4\.0\s+0/);
    expect(text).toMatch(/public\.orders\s+needs-resnapshot\s+HISTORY_GAP: slot gone/);
    expect(text).toContain('dead letters: 3');
    expect(text).toContain('slot retains 2.0 KiB');
    expect(text).not.toMatch(/\x1b/);
  });

  it('names the sinks that hold a table, in the status and the plain line', () => {
    const held = snapshot({ tables: [{ table: 'public.customers', state: 'paused', reason: 'OPERATOR_PAUSE: test', heldBy: ['warehouse', 'search'] }] });
    expect(renderStatus(held).join('\n')).toMatch(/public\.customers\s+paused\s+held by warehouse, search; OPERATOR_PAUSE: test/);
    expect(renderStatusLine(held)).toContain('tables 1 paused (held: public.customers by warehouse, search)');
    expect(renderStatus(snapshot()).join('\n')).not.toContain('held by');
  });

  it('says when no heartbeat arrived yet and when the last one is stale', () => {
    expect(
      renderStatus(snapshot({ sinks: [{ sink: 'w', lagMs: null, lagAt: null, lagP50Ms: null, lagP99Ms: null, eventsPerSecond: 0, deadLetters: 0 }] })).join(
        '\n',
      ),
    ).toContain('waiting for heartbeat');
    expect(renderStatus(snapshot({ now: 300_000 })).join('\n')).toMatch(/850 ms \(stale 1m41s\)/);
  });

  it('shows how many records the normalizer read with its DMS decoder (docs/local.md, "DMS records")', () => {
    const s = snapshot({ capture: { ...snapshot().capture, dmsDecoded: 1234 } });
    expect(renderStatus(s).join('\n')).toContain('DMS-decoded 1234');
    expect(renderStatusLine(s)).toContain('DMS-decoded 1234');
  });

  it('shows a poller stalled on an infrastructure error, in the status and the plain line', () => {
    const stalled = snapshot({
      consumers: [
        {
          consumer: 'warehouse',
          recordsPerSecond: 0,
          behindMs: 0,
          retries: 12,
          deadLetters: 0,
          stalledMs: 42_000,
          lastError: 'Error: connect ECONNREFUSED 127.0.0.1:5432',
        },
      ],
    });
    expect(renderStatus(stalled).join('\n')).toMatch(
      /warehouse STALLED for 42\.0 s, retrying without limit \(nothing is skipped\): Error: connect ECONNREFUSED/,
    );
    expect(renderStatusLine(stalled)).toContain('warehouse STALLED for 42.0 s');
    expect(renderStatus(snapshot()).join('\n')).not.toContain('STALLED');
  });

  it('lists recent problems with their age', () => {
    const text = renderStatus(snapshot({ problems: [{ at: 195_000, text: 'warehouse-applier: table batch not applied' }] })).join('\n');
    expect(text).toContain('recent problems');
    expect(text).toContain('5.0 s ago  warehouse-applier: table batch not applied');
  });

  it('cuts lines to the terminal width so that the redraw stays aligned', () => {
    const out: string[] = [];
    const w = new StatusWriter(
      (t) => out.push(t),
      true,
      10_000,
      () => 30,
    );
    w.update(snapshot());
    expect(out[0]!.split('\n').every((l) => l.length <= 30)).toBe(true);
  });

  it('shows a capture error', () => {
    const line = renderStatusLine(snapshot({ capture: { ...snapshot().capture, state: 'failed', error: 'HistoryGapError: slot gone' } }));
    expect(line).toContain('capture failed');
    expect(line).toContain('ERROR HistoryGapError: slot gone');
    expect(line).toContain('tables 1 active, 1 needs-resnapshot');
  });

  it('redraws in place on a terminal and prints plain periodic lines otherwise', () => {
    const tty: string[] = [];
    const w = new StatusWriter((t) => tty.push(t), true);
    w.update(snapshot());
    w.update(snapshot());
    expect(tty[0]).not.toMatch(/\x1b\[/);
    const lines = renderStatus(snapshot()).length;
    expect(tty[1]!.startsWith(`\x1b[${lines}F\x1b[J`)).toBe(true);

    const plain: string[] = [];
    const p = new StatusWriter((t) => plain.push(t), false, 10_000);
    p.update(snapshot({ now: 200_000 }));
    p.update(snapshot({ now: 205_000 }));
    p.update(snapshot({ now: 211_000 }));
    expect(plain).toHaveLength(2);
    expect(plain.join('')).not.toMatch(/\x1b/);
  });

  it('formats durations', () => {
    expect(formatMs(null)).toBe('-');
    expect(formatMs(12)).toBe('12 ms');
    expect(formatMs(2_345)).toBe('2.3 s');
    expect(formatMs(185_000)).toBe('3m05s');
  });
});

describe('metrics collector', () => {
  const emf = (metrics: Record<string, number | number[]>, dims: Record<string, string>, at = 1_000) => ({
    _aws: {
      Timestamp: at,
      CloudWatchMetrics: [
        { Namespace: 'CdcPlatform', Dimensions: [Object.keys(dims)], Metrics: Object.keys(metrics).map((Name) => ({ Name, Unit: 'Count' })) },
      ],
    },
    ...dims,
    ...metrics,
  });

  it('reads EMF documents, including aggregated arrays, per dimension set', () => {
    const c = new MetricsCollector();
    expect(c.ingestEmf(emf({ EndToEndLag: [100, 300, 200] }, { Sink: 'warehouse', Source: 'demo' }))).toBe(true);
    expect(c.ingestEmf(emf({ EndToEndLag: 50 }, { Sink: 'search', Source: 'demo' }))).toBe(true);
    expect(c.ingestEmf({ level: 'INFO', message: 'not a metric' })).toBe(false);
    expect(c.valuesSince('EndToEndLag', { Sink: 'warehouse' }, 0)).toEqual([100, 300, 200]);
    expect(c.total('EndToEndLag')).toBe(650);
    expect(c.latest('EndToEndLag', { Sink: 'warehouse' })).toEqual({ value: 200, at: 1_000 });
    expect(c.dimensionValues('EndToEndLag', 'Sink')).toEqual(['search', 'warehouse']);
  });

  it('computes rates and percentiles', () => {
    const c = new MetricsCollector();
    for (let i = 0; i < 10; i++) c.record('EventsApplied', { Sink: 'w' }, 5, 10_000 + i * 1000);
    expect(c.ratePerSecond('EventsApplied', { Sink: 'w' }, 5_000, 20_000)).toBe(5);
    expect(percentile([5, 1, 4, 2, 3], 50)).toBe(3);
    expect(percentile([5, 1, 4, 2, 3], 99)).toBe(5);
    expect(percentile([], 50)).toBeNull();
  });

  it('takes handler logs off stderr, noting their errors, and passes other stderr text through', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-metrics-'));
    const seen: string[] = [];
    const real = process.stderr.write;
    process.stderr.write = ((chunk: string) => {
      seen.push(String(chunk));
      return true;
    }) as typeof process.stderr.write;
    try {
      const c = new MetricsCollector();
      const cap = captureStdout(c, { emfFile: path.join(dir, 'emf'), logFile: path.join(dir, 'log') });
      process.stderr.write('{"level":"ERROR","message":"table batch not applied","service":"warehouse-applier","error":"boom"}\n');
      process.stderr.write('plain warning\n');
      await cap.restore();
      expect(seen).toEqual(['plain warning\n']);
      expect(c.problemsSince(0).map((p) => p.text)).toEqual(['warehouse-applier: table batch not applied (boom)']);
      expect(await readFile(path.join(dir, 'log'), 'utf8')).toContain('table batch not applied');
    } finally {
      process.stderr.write = real;
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('takes EMF and handler logs off stdout into files, and gives stdout back', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-metrics-'));
    try {
      const c = new MetricsCollector();
      const cap = captureStdout(c, { emfFile: path.join(dir, 'emf'), logFile: path.join(dir, 'log') });
      process.stdout.write(`${JSON.stringify(emf({ HeartbeatsWritten: 1 }, { Source: 'demo' }))}\n{"level":"INFO","mes`);
      process.stdout.write('sage":"hello"}\n');
      await cap.restore();
      expect(c.total('HeartbeatsWritten')).toBe(1);
      expect(await readFile(path.join(dir, 'log'), 'utf8')).toBe('{"level":"INFO","message":"hello"}\n');
      expect(await readFile(path.join(dir, 'emf'), 'utf8')).toContain('HeartbeatsWritten');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('archive', () => {
  it('names objects in the Firehose layout, stable for the same records', () => {
    const at = new Date(Date.UTC(2026, 10, 29, 7, 5, 9));
    expect(archiveKey('change-log/', 'change-log', at, 'shardId-000000000001', '49', '51')).toBe(
      'change-log/2026/11/29/07/change-log-2026-11-29-07-05-09-shardId-000000000001-49-51',
    );
  });

  it('stores, lists and reads objects in a folder, and refuses unsafe keys', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-archive-'));
    try {
      const a = new FolderArchive(dir);
      await a.put('x/2026/a', 'one\n');
      await a.put('x/2026/b', Buffer.from('two\n'));
      await a.put('y/c', 'three\n');
      expect(await a.list('x/')).toEqual(['x/2026/a', 'x/2026/b']);
      expect((await a.get('x/2026/b')).toString()).toBe('two\n');
      // A prefix that ends inside a name matches by name (as S3's); start-after lists only later keys (as S3's StartAfter).
      await a.put('x/2026b', 'four\n');
      expect(await a.list('x/2026')).toEqual(['x/2026/a', 'x/2026/b', 'x/2026b']);
      expect(await a.list('x/', 'x/2026/a')).toEqual(['x/2026/b', 'x/2026b']);
      expect(await a.list('nothing/here/')).toEqual([]);
      await expect(a.list('../')).rejects.toThrow(/not a safe relative object key/);
      await expect(a.put('../escape', 'no')).rejects.toThrow(/not a safe relative object key/);
      await expect(a.put('/abs', 'no')).rejects.toThrow(/not a safe/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('the copier writes a batch as one newline-delimited object, the same key on a retry', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-archive-'));
    try {
      const a = new FolderArchive(dir);
      const copy = createArchiveCopier({ archive: a });
      const event = toKinesisStreamEvent(
        [
          { SequenceNumber: '100', PartitionKey: 'k', Data: Buffer.from('{"a":1}'), ApproximateArrivalTimestamp: new Date(Date.UTC(2026, 0, 2, 3, 4, 5)) },
          { SequenceNumber: '101', PartitionKey: 'k', Data: Buffer.from('{"a":2}'), ApproximateArrivalTimestamp: new Date(Date.UTC(2026, 0, 2, 3, 4, 6)) },
        ],
        { streamArn: 'arn:aws:kinesis:us-east-1:000000000000:stream/cdc-change-log', shardId: 'shardId-000000000000' },
      );
      await copy(event);
      await copy(event);
      const keys = await a.list();
      expect(keys).toEqual(['change-log/2026/01/02/03/change-log-2026-01-02-03-04-05-shardId-000000000000-100-101']);
      expect((await a.get(keys[0]!)).toString()).toBe('{"a":1}\n{"a":2}\n');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('cdc local flags', () => {
  it('parses a demo run and a capture of an existing database', () => {
    const demo = parseLocalArgs(['--demo', '--duration', '60s', '--state-dir', 'x', '--rate', '5']);
    expect(demo).toMatchObject({ demo: true, durationMs: 60_000, stateDir: 'x', rate: 5, sourceUrl: null });
    const own = parseLocalArgs(['--source', 'postgres://u@h/db', '--tables', 'public.a, public.b', '--warehouse', 'postgres://u@w/dw']);
    expect(own).toMatchObject({ demo: false, sourceUrl: 'postgres://u@h/db', tables: ['public.a', 'public.b'], warehouseUrl: 'postgres://u@w/dw' });
  });

  it('refuses what cannot run, saying why', () => {
    const bad = (args: string[], msg: RegExp) => {
      expect(() => parseLocalArgs(args)).toThrow(UsageError);
      expect(() => parseLocalArgs(args)).toThrow(msg);
    };
    bad([], /choose --demo .* or --source/);
    bad(['--demo', '--source', 'postgres://x'], /exclude each other/);
    bad(['--source', 'postgres://x'], /needs --tables/);
    bad(['--source', 'postgres://x', '--tables', 'nodot'], /schema\.table/);
    bad(['--demo', '--duration', 'soon'], /60s, 5m or 1h/);
    bad(['--demo', '--rate', '-1'], /positive integer/);
    bad(['--demo', '--bogus'], /unknown option '--bogus'/);
    bad(['--demo', '--state-dir'], /needs a value/);
  });

  it('runs the search sink by default against the stand-in; --search URL points at a real one; --no-search turns it off', () => {
    expect(parseLocalArgs(['--demo'])).toMatchObject({ search: true, searchUrl: null, searchId: 'search' });
    expect(parseLocalArgs(['--demo', '--search', 'http://localhost:9200', '--search-id', 'idx'])).toMatchObject({
      search: true,
      searchUrl: 'http://localhost:9200',
      searchId: 'idx',
    });
    expect(parseLocalArgs(['--demo', '--no-search'])).toMatchObject({ search: false });
    expect(() => parseLocalArgs(['--demo', '--search', 'localhost:9200'])).toThrow(/http\(s\) URL/);
    expect(() => parseLocalArgs(['--demo', '--search', 'http://x:9200', '--no-search'])).toThrow(/exclude each other/);
    expect(() => parseLocalArgs(['--demo', '--search-id', 'warehouse'])).toThrow(/must differ/);
  });

  it('the live status shows the search sink beside the warehouse', () => {
    const s = snapshot({
      sinks: [...snapshot().sinks, { sink: 'search', lagMs: 1200, lagAt: 199_000, lagP50Ms: 900, lagP99Ms: 3000, eventsPerSecond: 5, deadLetters: 0 }],
    });
    const text = renderStatus(s).join('\n');
    expect(text).toMatch(/warehouse +850 ms/);
    expect(text).toMatch(/search +1\.2 s +900 ms +3\.0 s/);
    expect(renderStatusLine(s)).toMatch(/warehouse lag 850 ms .*; search lag 1\.2 s/);
  });

  it('reads durations', () => {
    expect(parseDuration('90')).toBe(90_000);
    expect(parseDuration('1500ms')).toBe(1_500);
    expect(parseDuration('5m')).toBe(300_000);
    expect(parseDuration('1h')).toBe(3_600_000);
  });
});

describe('demo data', () => {
  it('is reproducible from a seed, and document bodies are large enough to be stored out of line', () => {
    const a = seededRandom(7);
    const b = seededRandom(7);
    expect([a(), a(), a()]).toEqual([b(), b(), b()]);
    const body = documentBody(seededRandom(1));
    expect(body.length).toBeGreaterThan(2048);
  });
});
