/** An audit entry as the tests' control-plane writes need one: actor `test`, outcome `done`, no detail. */
import type { AuditEntry } from '../../lambda/core/shared/control-plane.ts';

export function testAudit(source: string, action: string, table: string): AuditEntry {
  return { at: new Date().toISOString(), actor: 'test', action, source, table, outcome: 'done', detail: {} };
}
