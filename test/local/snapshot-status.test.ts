/** The snapshot lines of `cdc local`'s live status and the snapshot flags of `cdc local` (docs/snapshot.md). */
import { describe, expect, it } from 'vitest';
import { renderStatus, renderStatusLine, type StatusSnapshot } from '../../local/status.ts';
import { parseLocalArgs } from '../../bin/cli/local-args.ts';
import { UsageError } from '../../bin/cli/command.ts';

function status(snapshots: StatusSnapshot['snapshots']): StatusSnapshot {
  return {
    now: 200_000,
    startedAt: 100_000,
    source: 'app',
    where: [],
    capture: { state: 'running', transactions: 1, records: 1, recordsPerSecond: 0, lastCommitLsn: null, slotRetainedBytes: null, error: null },
    workload: null,
    consumers: [],
    sinks: [],
    tables: [],
    ...(snapshots ? { snapshots } : {}),
    deadLetters: 0,
    problems: [],
    hint: null,
  };
}

const line = {
  table: 'public.accounts',
  status: 'running',
  rowsDone: 12_000,
  estimatedRows: 25_000,
  rowsPerSecond: 4200,
  etaSeconds: 3.1,
  throttle: 'full-speed',
  chunkSize: 3000,
  sinceUpdateMs: 500,
  error: null,
};

describe('snapshot status', () => {
  it('shows a line per snapshotting table: rows done / estimated, rate, ETA, throttle', () => {
    const text = renderStatus(
      status([line, { ...line, table: 'public.tags', status: 'done', rowsDone: 10, estimatedRows: 10, etaSeconds: 0, throttle: 'idle', chunkSize: 0 }]),
    ).join('\n');
    expect(text).toContain('snapshots (rows done / estimated, rate, ETA, throttle)');
    expect(text).toMatch(/public\.accounts\s+running\s+12000\/25000 \(48%\)\s+4200 rows\/s\s+ETA 3\.1 s\s+full-speed \(chunk 3000\)/);
    expect(text).toMatch(/public\.tags\s+done\s+10\/10 \(100%\)\s+.*done\s+idle/);
    expect(renderStatusLine(status([line]))).toContain('snapshot public.accounts 12000/25000 rows 4200/s ETA 3.1 s full-speed');
  });

  it('says when a running snapshot made no progress, and shows nothing without snapshots', () => {
    expect(renderStatus(status([{ ...line, sinceUpdateMs: 45_000, throttle: 'fenced' }])).join('\n')).toMatch(/fenced.*no progress for 45\.0 s/);
    expect(renderStatus(status(undefined)).join('\n')).not.toContain('snapshots');
  });

  it('parses --no-snapshot, --snapshot-chunk and --snapshot-replica', () => {
    const base = ['--source', 'postgres://x/app', '--tables', 'public.t'];
    expect(parseLocalArgs(base)).toMatchObject({ snapshot: true, snapshotChunk: null, snapshotReplica: null });
    expect(parseLocalArgs([...base, '--no-snapshot'])).toMatchObject({ snapshot: false });
    expect(parseLocalArgs([...base, '--snapshot-chunk', '500', '--snapshot-replica', 'postgres://r/app'])).toMatchObject({
      snapshotChunk: 500,
      snapshotReplica: 'postgres://r/app',
    });
    expect(() => parseLocalArgs([...base, '--snapshot-chunk', '0'])).toThrow(UsageError);
  });
});
