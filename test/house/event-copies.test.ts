/**
 * The warehouse applier keeps most events as lazy events (lambda/core/sink/lazy-event.ts): their
 * key and images live on the class's prototype, parsed on first read, so an object spread of one
 * (`{ ...e, … }`) silently leaves the key and both images out. A copy of an event is made from
 * `plainEvent(e)` (docs/warehouse-apply.md, "The critical path: append"). This test finds object
 * spreads, in the code a lazy event reaches, of a value whose name says it is an event (`e`,
 * `ev`, `event`, `…Event`, `x.event`), by the TypeScript parser (comments and strings never count).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import ts from 'typescript';
import { describe, expect, test } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '..', '..');
/** Where a lazy event goes: the sink's admission and batch, the warehouse's core, the warehouse adapters. */
const REACHED = ['lambda/core/sink', 'lambda/core/warehouse', 'lambda/adapters'];
const EVENT_NAME = /^(e|ev|event|[a-z]\w*Event)$/;

function files(dir: string): string[] {
  return fs
    .readdirSync(path.join(ROOT, dir), { withFileTypes: true })
    .flatMap((d) => (d.isDirectory() ? files(path.join(dir, d.name)) : d.name.endsWith('.ts') ? [path.join(dir, d.name)] : []));
}

/** Each spread of an event-named value in an object literal of `source`, as `file:line: text`. */
function eventSpreads(file: string, source: string): string[] {
  const sf = ts.createSourceFile(file, source, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isSpreadAssignment(node)) {
      const x = node.expression;
      const name = ts.isIdentifier(x) ? x.text : ts.isPropertyAccessExpression(x) ? x.name.text : null;
      if (name !== null && EVENT_NAME.test(name)) found.push(`${file}:${sf.getLineAndCharacterOfPosition(node.getStart()).line + 1}: ${node.getText()}`);
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return found;
}

describe('copies of change events', () => {
  test('no object spread of an event where a lazy event can be: copies go through plainEvent', () => {
    const spreads = REACHED.flatMap(files).flatMap((f) => eventSpreads(f, fs.readFileSync(path.join(ROOT, f), 'utf8')));
    expect(spreads, 'use { ...plainEvent(e), … }').toEqual([]);
  });

  test('the check finds a spread of an event and lets plainEvent and other spreads through', () => {
    const src = 'const a = { ...e, op: "x" }; const b = { ...item.event }; const c = { ...plainEvent(e) }; const d = { ...e.after }; const f = { ...row };';
    expect(eventSpreads('x.ts', src).map((s) => s.replace(/^x\.ts:1: /, ''))).toEqual(['...e', '...item.event']);
  });
});
