/**
 * The rebuild entry point of the operator function on AWS (docs/rebuild.md, "On AWS"): a rebuild
 * of a sink's table is checked by the sink's rebuild worker (invoked synchronously: it reaches
 * the archive, the stream and the warehouse from the VPC), then claimed in the control plane
 * (one rebuild per sink, audited) and started as an execution of the sink's rebuild state
 * machine, which invokes the worker slice by slice until it is done. The operator answers at
 * once; `cdc status` shows the rebuild while it runs, `cdc audit` its start and its end.
 */
import { InvokeCommand, type LambdaClient } from '@aws-sdk/client-lambda';
import { StartExecutionCommand, type SFNClient } from '@aws-sdk/client-sfn';
import { EnvName } from '../../contracts/env.ts';
import type { ControlPlane } from '../core/shared/control-plane.ts';
import { CdcError, ConfigurationError } from '../core/shared/errors.ts';
import type { RebuildScheduler } from '../core/operator/operator.ts';
import type { Refusal } from '../core/operator/operator-decisions.ts';
import { claimRebuildSlot, newRebuildId } from '../core/rebuild/rebuild.ts';

/** Per sink, its rebuild worker function and state machine (`CDC_REBUILD_WORKERS`). */
export type RebuildWorkers = Record<string, { worker: string; stateMachine: string }>;

/** Parses `CDC_REBUILD_WORKERS`, naming the entry that is wrong; unset or empty: no sink has a rebuild worker. */
export function parseRebuildWorkers(text: string | undefined): RebuildWorkers {
  if (text === undefined || text.trim() === '') return {};
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new ConfigurationError(`${EnvName.REBUILD_WORKERS}: not valid JSON: ${(e as Error).message}`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v))
    throw new ConfigurationError(`${EnvName.REBUILD_WORKERS}: expected an object of sink id → { worker, stateMachine }`);
  const out: RebuildWorkers = {};
  for (const [sink, w] of Object.entries(v as Record<string, unknown>)) {
    const o = w as { worker?: unknown; stateMachine?: unknown };
    if (typeof o?.worker !== 'string' || o.worker === '' || typeof o.stateMachine !== 'string' || o.stateMachine === '') {
      throw new ConfigurationError(`${EnvName.REBUILD_WORKERS}.${sink}: expected { "worker": function name, "stateMachine": ARN }, got ${JSON.stringify(w)}`);
    }
    out[sink] = { worker: o.worker, stateMachine: o.stateMachine };
  }
  return out;
}

export interface AwsRebuildsDeps {
  controlPlane: ControlPlane;
  workers: RebuildWorkers;
  /** Invokes a worker synchronously and returns its answer (`lambdaInvoker`). */
  invoke: (functionName: string, payload: unknown) => Promise<unknown>;
  /** Starts an execution named `name` and returns its ARN (`stepFunctionsStarter`). */
  start: (stateMachineArn: string, name: string, input: unknown) => Promise<string>;
  now?: () => Date;
}

/** The operator's `RebuildScheduler` on AWS (see the module comment). */
export function awsRebuilds(deps: AwsRebuildsDeps): RebuildScheduler {
  const now = deps.now ?? (() => new Date());
  const notDeployed = (sink: string): Refusal => ({
    code: 'REBUILD_NOT_AVAILABLE',
    reason: `no rebuild worker is deployed for sink ${sink}`,
    hint: 'add a WarehouseRebuild for the sink to the stack (docs/rebuild.md, "On AWS"), or run cdc rebuild against a cdc local state folder',
  });
  return {
    async check(r) {
      const w = deps.workers[r.sink];
      if (!w) return { refusal: notDeployed(r.sink) };
      const answer = (await deps.invoke(w.worker, { op: 'check', request: r })) as { refusal?: unknown };
      if (!answer || typeof answer !== 'object' || !('refusal' in answer))
        throw new CdcError('REBUILD_WORKER_ANSWER', `the rebuild worker ${w.worker} answered the check with ${JSON.stringify(answer)}`);
      return { refusal: (answer.refusal as Refusal | null) ?? null };
    },
    async run(r) {
      const w = deps.workers[r.sink];
      if (!w) return { refusal: notDeployed(r.sink) };
      const at = now();
      const id = newRebuildId(at);
      const request = {
        source: r.source,
        table: r.table,
        sink: r.sink,
        ...(r.from !== undefined ? { from: r.from } : {}),
        rehearse: r.rehearse,
        actor: r.actor,
      };
      const claimed = await claimRebuildSlot(deps.controlPlane, request, id, at);
      if ('refusal' in claimed) return { refusal: claimed.refusal };
      let execution: string;
      try {
        execution = await deps.start(w.stateMachine, id, { id, request });
      } catch (err) {
        // Nothing runs it: free the slot again (the start is audited; the end says why).
        await deps.controlPlane.releaseRebuild(r.sink, id, now().toISOString()).catch(() => undefined);
        throw err;
      }
      return {
        message: `rebuild ${id} of ${r.source}/${r.table} for sink ${r.sink} started (${r.rehearse ? 'rehearsal' : 'swap'}): it runs in the sink's rebuild state machine; cdc status shows it while it runs, cdc audit records its end`,
        detail: { id, state: 'running', mode: r.rehearse ? 'rehearsal' : 'swap', execution },
      };
    },
  };
}

/** `invoke` over a Lambda client: RequestResponse; a function error is thrown with its payload. */
export function lambdaInvoker(client: LambdaClient): AwsRebuildsDeps['invoke'] {
  return async (functionName, payload) => {
    const out = await client.send(
      new InvokeCommand({ FunctionName: functionName, InvocationType: 'RequestResponse', Payload: Buffer.from(JSON.stringify(payload)) }),
    );
    const text = out.Payload ? Buffer.from(out.Payload).toString('utf8') : '';
    if (out.FunctionError) throw new CdcError('REBUILD_WORKER_FAILED', `the rebuild worker ${functionName} failed (${out.FunctionError}): ${text}`);
    return text === '' ? null : (JSON.parse(text) as unknown);
  };
}

/** `start` over a Step Functions client. */
export function stepFunctionsStarter(client: SFNClient): AwsRebuildsDeps['start'] {
  return async (stateMachineArn, name, input) => {
    const out = await client.send(new StartExecutionCommand({ stateMachineArn, name, input: JSON.stringify(input) }));
    return out.executionArn ?? '';
  };
}
