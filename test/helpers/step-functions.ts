/**
 * The smallest honest stand-in for an AWS Step Functions Standard execution, for the subset of the
 * Amazon States Language the platform's state machines use (no local Step Functions service runs
 * on this machine). It interprets the definition the CDK app synthesises, so a test runs the
 * deployed state machine's own wiring (paths, retries, catches, choices) against the handlers
 * in process.
 *
 * Kept, as the Amazon States Language specification states them:
 * - `Task` states whose `Resource` is a Lambda function ARN (the `payloadResponseOnly` form: the
 *   function's result is the task's result); `Parameters` with `key.$` JSONPath values;
 *   `ResultPath` (default `$`, `null` discards); `InputPath`/`OutputPath` (default `$`).
 * - `Retry`: retriers are tried in order, the first whose `ErrorEquals` matches the error is used
 *   (`States.ALL` matches every error); each retrier counts its own attempts for one entry into
 *   the state, `MaxAttempts` (default 3) retries after the first attempt; the wait before retry n
 *   is `IntervalSeconds` (default 1) × `BackoffRate` (default 2)^(n-1), capped at
 *   `MaxDelaySeconds`, and with `JitterStrategy: FULL` a uniform draw below it. Waits are recorded,
 *   not slept (the test passes time by itself).
 * - `Catch`: after the retries are spent, the first catcher whose `ErrorEquals` matches moves to
 *   its `Next` with `{ Error, Cause }` placed at its `ResultPath` (default `$`).
 * - `Choice` with `BooleanEquals`, `StringEquals`, `NumericEquals` and `IsPresent` on a
 *   `Variable`, and `Default`; no match and no default fails with `States.NoChoiceMatched`.
 * - A parameter path that does not resolve fails the execution with `States.Runtime`, which no
 *   retrier or catcher takes (not even `States.ALL`).
 * - `Succeed`, `Fail` (`Error`, `Cause`), `Pass` (`Result`, `ResultPath`).
 * - A state's output over 256 KiB fails the execution with `States.DataLimitExceeded`.
 * - A Lambda function's error reaches the state machine as `Error` = the error's name and
 *   `Cause` = `{"errorType","errorMessage"}` as JSON, as the Lambda service reports it.
 *
 * Anything else in a definition (Map, Parallel, Wait, intrinsic functions, `$$` context paths,
 * other resources) is refused with an error naming it, never guessed.
 */

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

interface Retrier {
  ErrorEquals: string[];
  IntervalSeconds?: number;
  MaxAttempts?: number;
  BackoffRate?: number;
  MaxDelaySeconds?: number;
  JitterStrategy?: 'FULL' | 'NONE';
}
interface Catcher {
  ErrorEquals: string[];
  ResultPath?: string | null;
  Next: string;
}
interface State {
  Type: string;
  Next?: string;
  End?: boolean;
  Resource?: string;
  Parameters?: Record<string, Json>;
  ResultPath?: string | null;
  InputPath?: string | null;
  OutputPath?: string | null;
  Result?: Json;
  Retry?: Retrier[];
  Catch?: Catcher[];
  Choices?: Array<{ Variable: string; Next: string; BooleanEquals?: boolean; StringEquals?: string; NumericEquals?: number; IsPresent?: boolean }>;
  Default?: string;
  Error?: string;
  Cause?: string;
  TimeoutSeconds?: number;
}
export interface StateMachineDefinition {
  StartAt: string;
  States: Record<string, State>;
  TimeoutSeconds?: number;
  Comment?: string;
}

/** One entry of the execution's history (what the console's event list would show, reduced). */
export type HistoryEvent =
  | { type: 'StateEntered'; state: string }
  | { type: 'TaskFailed'; state: string; error: string; cause: string; attempt: number }
  | { type: 'RetryScheduled'; state: string; error: string; waitSeconds: number; attempt: number }
  | { type: 'Caught'; state: string; error: string; next: string }
  | { type: 'ExecutionSucceeded' }
  | { type: 'ExecutionFailed'; error: string; cause: string };

export interface ExecutionResult {
  status: 'SUCCEEDED' | 'FAILED';
  output?: Json;
  error?: string;
  cause?: string;
  history: HistoryEvent[];
  /** Sum of the retry waits the real service would have slept. */
  waitedSeconds: number;
}

export interface ExecutionOptions {
  /** Invokes the Lambda function `arn` with `payload` (as JSON) and returns its result, or throws its error. */
  invoke(arn: string, payload: Json): Promise<unknown>;
  /** A random draw in [0, 1) for FULL jitter. @default Math.random */
  random?: () => number;
  /** Refuse to run more than this many state transitions (a loop that never ends). @default 10,000 */
  maxTransitions?: number;
}

const DATA_LIMIT = 256 * 1024;

class StatesError extends Error {
  constructor(
    readonly error: string,
    readonly causeText: string,
  ) {
    super(`${error}: ${causeText}`);
  }
}

/** Resolves the CloudFormation `Fn::Join` of a synthesised `DefinitionString`, replacing each token by `tokens(token)`. */
export function definitionFromTemplate(definitionString: unknown, tokens: (token: unknown) => string): StateMachineDefinition {
  if (typeof definitionString === 'string') return JSON.parse(definitionString) as StateMachineDefinition;
  const join = (definitionString as { 'Fn::Join'?: [string, unknown[]] })['Fn::Join'];
  if (!join) throw new Error(`DefinitionString is neither a string nor an Fn::Join: ${JSON.stringify(definitionString).slice(0, 200)}`);
  return JSON.parse(join[1].map((p) => (typeof p === 'string' ? p : tokens(p))).join(join[0])) as StateMachineDefinition;
}

function getPath(doc: Json, path: string, where: string): Json | undefined {
  if (path.startsWith('$$')) throw new Error(`${where}: context paths ($$) are not supported by this stand-in: ${path}`);
  if (path === '$') return doc;
  if (!/^\$(\.[A-Za-z_][A-Za-z0-9_]*)+$/.test(path)) throw new Error(`${where}: only $.a.b paths are supported by this stand-in, got ${path}`);
  let cur: Json | undefined = doc;
  for (const part of path.slice(2).split('.')) {
    if (cur === null || typeof cur !== 'object' || Array.isArray(cur)) return undefined;
    cur = (cur as Record<string, Json>)[part];
  }
  return cur;
}

function setPath(doc: Json, path: string | null | undefined, value: Json, where: string): Json {
  if (path === null) return doc;
  if (path === undefined || path === '$') return value;
  if (!/^\$(\.[A-Za-z_][A-Za-z0-9_]*)+$/.test(path)) throw new Error(`${where}: only $.a.b result paths are supported by this stand-in, got ${path}`);
  const root: Record<string, Json> = doc !== null && typeof doc === 'object' && !Array.isArray(doc) ? structuredClone(doc) : {};
  const parts = path.slice(2).split('.');
  let cur = root;
  for (const p of parts.slice(0, -1)) {
    const next = cur[p];
    cur = cur[p] = next !== null && typeof next === 'object' && !Array.isArray(next) ? next : {};
  }
  cur[parts[parts.length - 1]!] = value;
  return root;
}

function parameters(template: Json, input: Json, where: string): Json {
  if (template === null || typeof template !== 'object') return template;
  if (Array.isArray(template)) return template.map((t) => parameters(t, input, where));
  const out: Record<string, Json> = {};
  for (const [k, v] of Object.entries(template)) {
    if (k.endsWith('.$')) {
      if (typeof v !== 'string') throw new Error(`${where}: ${k} must be a path`);
      if (v.startsWith('States.')) throw new Error(`${where}: intrinsic functions are not supported by this stand-in: ${v}`);
      const got = getPath(input, v, where);
      if (got === undefined) throw new StatesError('States.Runtime', `${where}: the JSONPath ${v} of ${k} could not be found in the input`);
      out[k.slice(0, -2)] = got;
    } else out[k] = parameters(v, input, where);
  }
  return out;
}

const matches = (list: readonly string[], error: string): boolean => list.includes('States.ALL') || list.includes(error);

function asLambdaError(err: unknown): StatesError {
  if (err instanceof StatesError) return err;
  // The Node.js runtime reports `errorType` as the error's `name` (CdcError sets it to the class's).
  const e = err instanceof Error ? err : new Error(String(err));
  const type = e.name || 'Error';
  return new StatesError(type, JSON.stringify({ errorType: type, errorMessage: e.message }));
}

/** Runs one execution of `definition` on `input` to its end. */
export async function runExecution(definition: StateMachineDefinition, input: Json, options: ExecutionOptions): Promise<ExecutionResult> {
  const history: HistoryEvent[] = [];
  const random = options.random ?? Math.random;
  let waitedSeconds = 0;
  let doc: Json = input;
  let name: string | undefined = definition.StartAt;
  const fail = (error: string, cause: string): ExecutionResult => {
    history.push({ type: 'ExecutionFailed', error, cause });
    return { status: 'FAILED', error, cause, history, waitedSeconds };
  };
  for (let transitions = 0; name !== undefined; transitions++) {
    if (transitions >= (options.maxTransitions ?? 10_000))
      throw new Error(`more than ${options.maxTransitions ?? 10_000} state transitions: the execution does not end`);
    const state: State | undefined = definition.States[name];
    if (!state) throw new Error(`state ${name} is not defined`);
    history.push({ type: 'StateEntered', state: name });
    const where = `state ${name}`;
    const effective = state.InputPath === null ? {} : (getPath(doc, state.InputPath ?? '$', where) ?? null);
    let next: string | undefined;
    switch (state.Type) {
      case 'Succeed':
        history.push({ type: 'ExecutionSucceeded' });
        return { status: 'SUCCEEDED', output: doc, history, waitedSeconds };
      case 'Fail':
        return fail(state.Error ?? 'States.Fail', state.Cause ?? '');
      case 'Pass': {
        doc = setPath(doc, state.ResultPath, state.Result !== undefined ? state.Result : effective, where);
        next = state.Next;
        break;
      }
      case 'Choice': {
        const hit = (state.Choices ?? []).find((c) => {
          const v = getPath(effective, c.Variable, where);
          if (c.IsPresent !== undefined) return (v !== undefined) === c.IsPresent;
          if (c.BooleanEquals !== undefined) return v === c.BooleanEquals;
          if (c.StringEquals !== undefined) return v === c.StringEquals;
          if (c.NumericEquals !== undefined) return v === c.NumericEquals;
          throw new Error(`${where}: a choice rule this stand-in does not support: ${JSON.stringify(c)}`);
        });
        next = hit?.Next ?? state.Default;
        if (next === undefined) return fail('States.NoChoiceMatched', `${where}: no choice rule matched and there is no Default`);
        break;
      }
      case 'Task': {
        if (!state.Resource || !/^arn:aws[a-z-]*:lambda:/.test(state.Resource))
          throw new Error(`${where}: only Lambda function resources are supported by this stand-in, got ${state.Resource}`);
        const attempts = new Map<Retrier, number>();
        let result: Json | undefined;
        let caught: { catcher: Catcher; err: StatesError } | undefined;
        // A path that does not resolve is States.Runtime: never retried nor caught, not even by States.ALL.
        let payload: Json;
        try {
          payload = state.Parameters ? parameters(state.Parameters, effective, where) : effective;
        } catch (err) {
          if (err instanceof StatesError) return fail(err.error, err.causeText);
          throw err;
        }
        for (let attempt = 1; ; attempt++) {
          try {
            const out = await options.invoke(state.Resource, JSON.parse(JSON.stringify(payload)) as Json);
            result = out === undefined ? null : (JSON.parse(JSON.stringify(out)) as Json);
            break;
          } catch (raw) {
            const err = asLambdaError(raw);
            history.push({ type: 'TaskFailed', state: name, error: err.error, cause: err.causeText, attempt });
            const retrier = (state.Retry ?? []).find((r) => matches(r.ErrorEquals, err.error));
            const used = retrier ? (attempts.get(retrier) ?? 0) : 0;
            if (retrier && used < (retrier.MaxAttempts ?? 3)) {
              attempts.set(retrier, used + 1);
              let wait = (retrier.IntervalSeconds ?? 1) * (retrier.BackoffRate ?? 2) ** used;
              if (retrier.MaxDelaySeconds !== undefined) wait = Math.min(wait, retrier.MaxDelaySeconds);
              if (retrier.JitterStrategy === 'FULL') wait = random() * wait;
              waitedSeconds += wait;
              history.push({ type: 'RetryScheduled', state: name, error: err.error, waitSeconds: wait, attempt });
              continue;
            }
            const catcher = (state.Catch ?? []).find((c) => matches(c.ErrorEquals, err.error));
            if (!catcher) return fail(err.error, err.causeText);
            caught = { catcher, err };
            break;
          }
        }
        if (caught) {
          history.push({ type: 'Caught', state: name, error: caught.err.error, next: caught.catcher.Next });
          doc = setPath(doc, caught.catcher.ResultPath, { Error: caught.err.error, Cause: caught.err.causeText }, where);
          next = caught.catcher.Next;
        } else {
          doc = setPath(doc, state.ResultPath, result ?? null, where);
          next = state.Next;
        }
        break;
      }
      default:
        throw new Error(`${where}: state type ${state.Type} is not supported by this stand-in`);
    }
    if (state.OutputPath !== undefined && state.Type !== 'Choice') doc = state.OutputPath === null ? {} : (getPath(doc, state.OutputPath, where) ?? null);
    const size = Buffer.byteLength(JSON.stringify(doc));
    if (size > DATA_LIMIT) return fail('States.DataLimitExceeded', `${where}: the state's output is ${size} bytes, over the 262144-byte limit`);
    if (state.End || next === undefined) {
      history.push({ type: 'ExecutionSucceeded' });
      return { status: 'SUCCEEDED', output: doc, history, waitedSeconds };
    }
    name = next;
  }
  throw new Error('unreachable');
}
