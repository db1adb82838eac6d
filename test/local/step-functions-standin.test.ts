/**
 * The Step Functions stand-in (test/helpers/step-functions.ts) keeps the Amazon States Language
 * semantics it claims: retriers in order with their own attempt counts and backoff, catchers with
 * their result path, choices, paths, the data limit, and a refusal of what it does not implement.
 */
import { describe, expect, it } from 'vitest';
import { definitionFromTemplate, runExecution, type StateMachineDefinition } from '../helpers/step-functions.ts';

const FN = 'arn:aws:lambda:us-east-1:000000000000:function:worker';

class Throttled extends Error {
  override name = 'Throttled';
}

/** A function that fails `failures` times with `make()`, then returns `value`. */
function flaky(failures: number, make: () => Error, value: unknown) {
  const calls: unknown[] = [];
  return {
    calls,
    invoke: async (_arn: string, payload: unknown) => {
      calls.push(payload);
      if (calls.length <= failures) throw make();
      return value;
    },
  };
}

const task = (extra: Record<string, unknown> = {}): StateMachineDefinition => ({
  StartAt: 'T',
  States: {
    T: { Type: 'Task', Resource: FN, Parameters: { op: 'go', 'id.$': '$.id' }, ResultPath: '$.result', End: true, ...extra },
    Caught: { Type: 'Pass', End: true },
  },
});

describe('Step Functions stand-in', () => {
  it('retries with the matching retrier, counts its attempts, backs off, and places the result at ResultPath', async () => {
    const f = flaky(3, () => new Throttled('slow down'), { ok: 1 });
    const def = task({ Retry: [{ ErrorEquals: ['States.ALL'], IntervalSeconds: 1, MaxAttempts: 3, BackoffRate: 2 }] });
    const r = await runExecution(def, { id: 'a', other: true }, { invoke: f.invoke });
    expect(r.status).toBe('SUCCEEDED');
    expect(r.output).toEqual({ id: 'a', other: true, result: { ok: 1 } });
    expect(f.calls).toEqual(Array(4).fill({ op: 'go', id: 'a' }));
    expect(r.history.filter((h) => h.type === 'RetryScheduled').map((h) => (h as { waitSeconds: number }).waitSeconds)).toEqual([1, 2, 4]);
    expect(r.waitedSeconds).toBe(7);
  });

  it('after MaxAttempts retries the first matching catcher gets { Error, Cause } at its ResultPath; without one the execution fails with the error', async () => {
    const def = task({
      Retry: [{ ErrorEquals: ['States.ALL'], MaxAttempts: 2 }],
      Catch: [
        { ErrorEquals: ['Other'], Next: 'Nope' },
        { ErrorEquals: ['States.ALL'], ResultPath: '$.error', Next: 'Caught' },
      ],
    });
    const f = flaky(99, () => new Throttled('slow down'), null);
    const r = await runExecution(def, { id: 'a' }, { invoke: f.invoke });
    expect(f.calls).toHaveLength(3);
    expect(r.status).toBe('SUCCEEDED');
    expect(r.output).toEqual({ id: 'a', error: { Error: 'Throttled', Cause: JSON.stringify({ errorType: 'Throttled', errorMessage: 'slow down' }) } });
    const bare = await runExecution(
      task({ Retry: [{ ErrorEquals: ['States.ALL'], MaxAttempts: 0 }] }),
      { id: 'a' },
      { invoke: flaky(99, () => new Error('boom'), null).invoke },
    );
    expect(bare).toMatchObject({ status: 'FAILED', error: 'Error', cause: JSON.stringify({ errorType: 'Error', errorMessage: 'boom' }) });
  });

  it('uses the first retrier whose ErrorEquals matches; the default MaxAttempts is 3; MaxDelaySeconds caps and FULL jitter draws below the wait', async () => {
    const def = task({
      Retry: [
        { ErrorEquals: ['Throttled'], IntervalSeconds: 10, MaxAttempts: 1 },
        { ErrorEquals: ['States.ALL'], IntervalSeconds: 100, BackoffRate: 10, MaxDelaySeconds: 500, JitterStrategy: 'FULL' },
      ],
    });
    // Throttled once (first retrier), then plain errors: the second retrier, 3 attempts, waits 100 → 1000 capped at 500, halved by the draw.
    let n = 0;
    const r = await runExecution(
      def,
      { id: 'a' },
      {
        invoke: async () => {
          n++;
          if (n === 1) throw new Throttled('x');
          if (n <= 4) throw new Error('y');
          return 'done';
        },
        random: () => 0.5,
      },
    );
    expect(r.status).toBe('SUCCEEDED');
    expect(r.history.filter((h) => h.type === 'RetryScheduled').map((h) => (h as { waitSeconds: number }).waitSeconds)).toEqual([10, 50, 250, 250]);
    let m = 0;
    const spent = await runExecution(
      def,
      { id: 'a' },
      {
        invoke: async () => {
          m++;
          throw new Error('always');
        },
      },
    );
    expect(m).toBe(4); // one attempt and the default three retries
    expect(spent.status).toBe('FAILED');
  });

  it('loops through a Choice until it matches, and fails with States.NoChoiceMatched when nothing does and there is no Default', async () => {
    const def: StateMachineDefinition = {
      StartAt: 'T',
      States: {
        T: { Type: 'Task', Resource: FN, ResultPath: '$.result', Next: 'Done?' },
        'Done?': { Type: 'Choice', Choices: [{ Variable: '$.result.done', BooleanEquals: true, Next: 'Yes' }], Default: 'T' },
        Yes: { Type: 'Succeed' },
      },
    };
    let n = 0;
    const r = await runExecution(def, {}, { invoke: async () => ({ done: ++n === 3 }) });
    expect(r.status).toBe('SUCCEEDED');
    expect(n).toBe(3);
    const noDefault = {
      ...def,
      States: { ...def.States, 'Done?': { Type: 'Choice', Choices: [{ Variable: '$.result.done', BooleanEquals: true, Next: 'Yes' }] } },
    };
    expect(await runExecution(noDefault, {}, { invoke: async () => ({ done: false }) })).toMatchObject({ status: 'FAILED', error: 'States.NoChoiceMatched' });
  });

  it('fails with States.Runtime on a missing parameter path and States.DataLimitExceeded over 256 KiB; refuses what it does not implement', async () => {
    expect(await runExecution(task(), { other: 1 }, { invoke: async () => null })).toMatchObject({ status: 'FAILED', error: 'States.Runtime' });
    expect(await runExecution(task(), { id: 'a' }, { invoke: async () => 'x'.repeat(300 * 1024) })).toMatchObject({
      status: 'FAILED',
      error: 'States.DataLimitExceeded',
    });
    await expect(runExecution({ StartAt: 'M', States: { M: { Type: 'Map', End: true } } }, {}, { invoke: async () => null })).rejects.toThrow(
      /state type Map is not supported/,
    );
    await expect(
      runExecution(
        { StartAt: 'T', States: { T: { Type: 'Task', Resource: 'arn:aws:states:::sqs:sendMessage', End: true } } },
        {},
        { invoke: async () => null },
      ),
    ).rejects.toThrow(/only Lambda function resources/);
    await expect(runExecution(task({ Parameters: { 'x.$': '$$.Execution.Id' } }), {}, { invoke: async () => null })).rejects.toThrow(/context paths/);
  });

  it('reads a synthesised DefinitionString (an Fn::Join with tokens)', () => {
    const def = definitionFromTemplate(
      { 'Fn::Join': ['', ['{"StartAt":"T","States":{"T":{"Type":"Task","Resource":"', { 'Fn::GetAtt': ['Worker', 'Arn'] }, '","End":true}}}']] },
      () => FN,
    );
    expect(def.States.T!.Resource).toBe(FN);
  });
});
