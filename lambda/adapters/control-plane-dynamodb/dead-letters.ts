/**
 * Dead letters in the control plane (docs/architecture.md §5.3): a letter and the degrade of its active table
 * with the audit entry are one transaction. A letter's record is kept whole: when it is over what
 * one item holds (`DEAD_LETTER_RECORD_MAX_BYTES`), it goes to the payload store and the item keeps
 * a preview, the reference, its size and SHA-256 (docs/large-records.md).
 */
import { randomUUID } from 'node:crypto';
import type { TransactWriteItem } from '@aws-sdk/client-dynamodb';
import { ControlPartition } from '../../../contracts/control-plane-keys.ts';
import { deadLetterKey, PayloadMismatchError, sha256 } from '../../core/shared/payload-store.ts';
import { cutUtf8, DEAD_LETTER_RECORD_MAX_BYTES, type DeadLetter } from '../../core/shared/control-plane.ts';
import { auditPut } from './audit.ts';
import { key, nonEmpty, toItem, transactionFailed, TRANSACTION_ATTEMPTS, type ControlTable, type Plain } from './control-table.ts';
import { getTable, tableStateUpdate } from './tables.ts';

const DEAD_LETTER_REASON_BYTES = 16 * 1024;

export async function putDeadLetter(t: ControlTable, letter: DeadLetter): Promise<void> {
  nonEmpty(letter.stage, 'letter.stage');
  nonEmpty(letter.code, 'letter.code');
  const whole = letter.record ?? '';
  const record = cutUtf8(whole, DEAD_LETTER_RECORD_MAX_BYTES);
  const reason = cutUtf8(letter.reason ?? '', DEAD_LETTER_REASON_BYTES);
  let stored: { recordRef: string; recordBytes: number; recordSha256: string } | null = null;
  if (record.cut && t.payloads) {
    const body = Buffer.from(whole, 'utf8');
    stored = {
      recordRef: await t.payloads.put(deadLetterKey(letter.stage, letter.at, randomUUID()), body),
      recordBytes: body.byteLength,
      recordSha256: sha256(body),
    };
  }
  const item = toItem({
    ...key.deadLetter(letter.stage, letter.at),
    kind: 'dead-letter',
    at: letter.at,
    stage: letter.stage,
    source: letter.source,
    table: letter.table,
    code: letter.code,
    reason: reason.text,
    origin: letter.origin,
    record: record.text,
    ...(stored ?? {}),
    truncated: letter.truncated || (record.cut && stored === null),
  });
  const writes: TransactWriteItem[] = [
    { Put: { TableName: t.tableName, Item: item, ConditionExpression: 'attribute_not_exists(pk)' } },
    { Put: { TableName: t.tableName, Item: toItem({ ...key.deadLetterStage(letter.stage), kind: 'dead-letter-stage', stage: letter.stage }) } },
  ];
  for (let attempt = 1; ; attempt++) {
    const current = letter.source !== null && letter.table !== null ? await getTable(t, letter.source, letter.table) : null;
    if (current === null || current.state !== 'active' || attempt > TRANSACTION_ATTEMPTS) {
      const outcome = await t.transact(writes);
      if (!outcome.ok) throw transactionFailed('putDeadLetter', outcome.reasons);
      return;
    }
    const stateReason = `${letter.code}: ${cutUtf8(letter.reason ?? '', 1024).text}`;
    const outcome = await t.transact([
      ...writes,
      tableStateUpdate(t, current.source, current.table, { state: 'degraded', reason: stateReason, at: new Date().toISOString() }, '#state = :active', {
        ':active': 'active',
      }),
      auditPut(t, {
        at: letter.at,
        actor: letter.stage === 'normalizer' ? 'normalizer' : `applier:${letter.stage}`,
        action: 'degrade-table',
        source: current.source,
        table: current.table,
        outcome: 'done',
        detail: { from: 'active', to: 'degraded', code: letter.code, reason: reason.text, origin: letter.origin, stage: letter.stage },
      }),
    ]);
    if (outcome.ok) return;
    // The table left `active` meanwhile: read it again and store the letter without degrading.
    if (outcome.reasons[2] !== 'ConditionalCheckFailed') throw transactionFailed('putDeadLetter', outcome.reasons);
  }
}

export async function listDeadLetters(t: ControlTable, stage?: string): Promise<DeadLetter[]> {
  const stages = stage !== undefined ? [stage] : (await t.query({ pk: ControlPartition.DEAD_LETTER_STAGES, skPrefix: 'STAGE#' })).map((i) => String(i.stage));
  const items: Plain[] = [];
  for (const s of stages) items.push(...(await t.query({ pk: ControlPartition.deadLetters(s) })));
  items.sort((a, b) => (String(a.sk) < String(b.sk) ? -1 : String(a.sk) > String(b.sk) ? 1 : 0));
  const out: DeadLetter[] = [];
  for (const i of items) {
    const letter: DeadLetter = {
      at: String(i.at),
      stage: String(i.stage),
      source: typeof i.source === 'string' ? i.source : null,
      table: typeof i.table === 'string' ? i.table : null,
      code: String(i.code),
      reason: String(i.reason),
      origin: String(i.origin),
      record: String(i.record),
      truncated: i.truncated === true,
    };
    if (typeof i.recordRef === 'string') {
      letter.recordRef = i.recordRef;
      if (t.payloads) {
        const body = await t.payloads.get(i.recordRef);
        if (body.byteLength !== Number(i.recordBytes) || sha256(body) !== i.recordSha256)
          throw new PayloadMismatchError(i.recordRef, `is not the record dead letter ${String(i.sk)} stored`);
        letter.record = body.toString('utf8');
      } else {
        letter.truncated = true; // only the preview: this reader has no payload store
      }
    }
    out.push(letter);
  }
  return out;
}
