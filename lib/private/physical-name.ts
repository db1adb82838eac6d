import { createHash } from 'node:crypto';
import { Names, Stack, Token } from 'aws-cdk-lib';
import type { IConstruct } from 'constructs';

/**
 * A deterministic DMS identifier for `scope`: lower-case letters, digits and single hyphens,
 * starting with a letter, at most `maxLength` characters, unique per stack and construct path
 * (an 8-character hash of the path ends it). DMS identifiers are needed at synth time: the
 * task's CloudWatch dimensions and the lifecycle handler's IAM scope name them.
 */
export function dmsIdentifier(scope: IConstruct, readable: string, maxLength = 31): string {
  const stack = Stack.of(scope);
  const stackPart = Token.isUnresolved(stack.stackName) ? '' : stack.stackName;
  const hash = createHash('sha256')
    .update(`${stackPart}/${Names.uniqueId(scope)}`)
    .digest('hex')
    .slice(0, 8);
  const clean = (s: string): string =>
    s
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, '-')
      .replace(/-+/g, '-')
      .replace(/^-|-$/g, '');
  const budget = maxLength - hash.length - 1;
  let head = clean(`${stackPart}-${readable}`).slice(0, budget).replace(/-$/, '');
  if (!/^[a-z]/.test(head)) head = `c${head}`.slice(0, budget).replace(/-$/, '');
  return `${head}-${hash}`;
}
