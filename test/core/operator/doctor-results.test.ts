/** The pre-flight's report (lambda/core/operator/doctor-results.ts): the text of a report, its fixes and its summary. */
import { describe, expect, it } from 'vitest';
import { formatReport } from '../../../lambda/core/operator/doctor-results.ts';
import { runChecks } from '../../../lambda/core/operator/doctor.ts';
import { good } from './doctor-fixture.ts';

describe('runChecks', () => {
  it('formats one line per check, the fix under it and a summary', () => {
    const lines = formatReport(runChecks(good({ walLevel: 'minimal' })));
    expect(lines[0]).toMatch(/^FAIL  wal_level: the source has wal_level = 'minimal'/);
    expect(lines[1]).toMatch(/^ {6}fix: ALTER SYSTEM SET wal_level = logical/);
    expect(lines[lines.length - 1]).toMatch(/^FAIL: 1 failed, 0 warnings, \d+ passed$/);
  });
});
