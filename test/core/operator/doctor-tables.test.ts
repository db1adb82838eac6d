/** The source pre-flight's checks of a captured table (lambda/core/operator/doctor-tables.ts), run by runChecks over hand-built facts: key, replica identity, grants, name, column types. */
import { describe, expect, it } from 'vitest';
import { CheckId, type CheckResult } from '../../../lambda/core/operator/doctor-results.ts';
import { runChecks } from '../../../lambda/core/operator/doctor.ts';
import type { TableFact } from '../../../lambda/core/operator/doctor-facts.ts';
import { table, good, status } from './doctor-fixture.ts';

describe('runChecks', () => {
  it('judges the replica identity against the key: USING INDEX not covering the key fails', () => {
    const id = (t: Partial<TableFact>): string | undefined => status(runChecks(good({ tables: [table(t)] })), CheckId.REPLICA_IDENTITY);
    expect(id({ replicaIdentity: 'i', identityIndexColumns: ['email'] })).toBe('FAIL');
    expect(id({ replicaIdentity: 'i', identityIndexColumns: ['id', 'email'] })).toBe('PASS');
    expect(id({ replicaIdentity: 'n' })).toBe('FAIL');
    expect(id({ replicaIdentity: 'd', primaryKey: [], declaredKey: ['id'] })).toBe('FAIL');
    expect(id({ replicaIdentity: 'f', primaryKey: [], declaredKey: ['id'] })).toBe('PASS');
    // a declared key the primary key does not carry: deletes under DEFAULT would lack it
    expect(
      id({
        replicaIdentity: 'd',
        primaryKey: ['id'],
        declaredKey: ['tenant', 'id'],
        columns: [
          { name: 'id', type: 'integer' },
          { name: 'tenant', type: 'text' },
        ],
      }),
    ).toBe('FAIL');
  });

  it('fails a missing table, a table without a key, a missing SELECT grant and a declared key naming unknown columns', () => {
    const rs = runChecks(
      good({
        tables: [
          table({ table: 'public.gone', exists: false }),
          table({ table: 'public.nokey', primaryKey: [], replicaIdentity: 'd' }),
          table({ table: 'public.secret', selectGranted: false }),
          table({ table: 'public.typo', declaredKey: ['idd'], replicaIdentity: 'f' }),
        ],
      }),
    );
    expect(status(rs, CheckId.TABLE_EXISTS, 'public.gone')).toBe('FAIL');
    expect(status(rs, CheckId.PRIMARY_KEY, 'public.nokey')).toBe('FAIL');
    expect(status(rs, CheckId.SELECT_GRANT, 'public.secret')).toBe('FAIL');
    expect(rs.find((r) => r.subject === 'public.secret' && r.check === CheckId.SELECT_GRANT)!.fix).toBe('GRANT SELECT ON public.secret TO "capture";');
    expect(status(rs, CheckId.PRIMARY_KEY, 'public.typo')).toBe('FAIL');
  });

  it('fails a table whose name takes the platform prefix _cdc_ (its warehouse objects could not be told apart: docs/architecture.md §5.4, "Names")', () => {
    const rs = runChecks(
      good({ tables: [table({ table: 'public._cdc_mirror_orders' }), table({ table: 'public._CDC_x' }), table({ table: 'public.cdc_orders' })] }),
    );
    expect(status(rs, CheckId.TABLE_NAME, 'public._cdc_mirror_orders')).toBe('FAIL');
    expect(rs.find((r) => r.check === CheckId.TABLE_NAME && r.subject === 'public._CDC_x')?.message).toMatch(/reserved for the platform/);
    expect(status(rs, CheckId.TABLE_NAME, 'public.cdc_orders')).toBeUndefined();
  });

  it('fails large-object columns and warns on LOB-mapped ones', () => {
    expect(
      status(
        runChecks(
          good({
            tables: [
              table({
                columns: [
                  { name: 'id', type: 'integer' },
                  { name: 'blob', type: 'lo' },
                ],
              }),
            ],
          }),
        ),
        CheckId.COLUMN_TYPES,
      ),
    ).toBe('FAIL');
    expect(
      status(
        runChecks(
          good({
            tables: [
              table({
                columns: [
                  { name: 'id', type: 'integer' },
                  { name: 'doc', type: 'jsonb' },
                ],
              }),
            ],
          }),
        ),
        CheckId.COLUMN_TYPES,
      ),
    ).toBe('WARN');
    expect(
      status(
        runChecks(
          good({
            tables: [
              table({
                columns: [
                  { name: 'id', type: 'integer' },
                  { name: 'tags', type: 'text[]' },
                ],
              }),
            ],
          }),
        ),
        CheckId.COLUMN_TYPES,
      ),
    ).toBe('WARN');
  });

  it('fails a virtual generated column by name (never stored or logged: docs/types.md); a stored one passes', () => {
    const rs = runChecks(
      good({
        tables: [
          table({
            columns: [
              { name: 'id', type: 'integer' },
              { name: 'half', type: 'numeric', generated: 'virtual' },
            ],
          }),
        ],
      }),
    );
    expect(status(rs, CheckId.COLUMN_TYPES)).toBe('FAIL');
    expect(rs.find((r) => r.check === CheckId.COLUMN_TYPES)!.message).toContain('(half)');
    expect(
      status(
        runChecks(
          good({
            tables: [
              table({
                columns: [
                  { name: 'id', type: 'integer' },
                  { name: 'twice', type: 'numeric', generated: 'stored' },
                ],
              }),
            ],
          }),
        ),
        CheckId.COLUMN_TYPES,
      ),
    ).toBe('PASS');
  });

  it('fails a numeric no warehouse type holds exactly, by column and declared type (docs/exact-numbers.md)', () => {
    const col = (declaredType: string): TableFact['columns'][number] => ({
      name: 'amount',
      type: declaredType.endsWith('[]') ? 'numeric[]' : 'numeric',
      declaredType,
    });
    const check = (declaredType: string): CheckResult =>
      runChecks(good({ tables: [table({ columns: [{ name: 'id', type: 'integer' }, col(declaredType)] })] })).find((r) => r.check === CheckId.COLUMN_TYPES)!;
    expect(check('numeric(39,2)')).toMatchObject({ status: 'FAIL', message: expect.stringContaining('amount numeric(39,2): precision 39 is beyond') });
    expect(check('numeric(5,-2)')).toMatchObject({ status: 'FAIL', message: expect.stringContaining('amount numeric(5,-2): scale -2 is outside 0..5') });
    expect(check('numeric(38,38)').status).toBe('PASS');
    expect(check('numeric').status).toBe('PASS');
    expect(check('numeric(50,2)[]').status).toBe('WARN'); // an array is carried as text (the LOB warning only)
  });

  it('does not hold excluded columns against the table: excluding them is the fix', () => {
    const columns: TableFact['columns'] = [
      { name: 'id', type: 'integer' },
      { name: 'half', type: 'numeric', generated: 'virtual' },
      { name: 'blob', type: 'lo' },
      { name: 'amount', type: 'numeric', declaredType: 'numeric(60,0)' },
    ];
    expect(status(runChecks(good({ tables: [table({ columns, excluded: ['half', 'blob'] })] })), CheckId.COLUMN_TYPES)).toBe('FAIL');
    const rs = runChecks(good({ tables: [table({ columns, excluded: ['half', 'blob', 'amount'] })] }));
    expect(rs.find((r) => r.check === CheckId.COLUMN_TYPES)).toMatchObject({
      status: 'PASS',
      message: '1 columns of carried types (half, blob, amount excluded)',
    });
  });
});
