import { Stack, Token, TokenComparison } from 'aws-cdk-lib';
import type { IChangeLog } from '../change-log.ts';

/**
 * Whether two change logs are the same stream, compared by ARN (`Token.compareStrings`), not by
 * object identity: an imported log and the log it refers to are the same. Two unresolved ARNs are
 * the same stream when they resolve to the same reference in one stack; `undefined` when synth
 * cannot tell (a literal ARN against a token, or tokens of different stacks).
 */
export function sameChangeLog(a: IChangeLog, b: IChangeLog): boolean | undefined {
  if (a === b) return true;
  const cmp = Token.compareStrings(a.changeLogStreamArn, b.changeLogStreamArn);
  if (cmp === TokenComparison.SAME) return true;
  if (cmp === TokenComparison.DIFFERENT) return false;
  if (cmp === TokenComparison.BOTH_UNRESOLVED && Stack.of(a) === Stack.of(b)) {
    const stack = Stack.of(a);
    return JSON.stringify(stack.resolve(a.changeLogStreamArn)) === JSON.stringify(stack.resolve(b.changeLogStreamArn));
  }
  return undefined;
}
