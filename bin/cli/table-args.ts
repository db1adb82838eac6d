/**
 * The options that name captured tables, shared by the commands that take them (`cdc local`,
 * `cdc doctor`): `--tables`, `--exclude-tables` and `--table-config` (docs/onboarding.md).
 */
import { readFile } from 'node:fs/promises';
import { isTablePattern } from '../../contracts/table-config.ts';
import { UsageError } from './command.ts';

function list(text: string): string[] {
  return text
    .split(',')
    .map((t) => t.trim())
    .filter((t) => t !== '');
}

/** `--tables`: schema.table names or capture patterns (`public.*`). */
export function parseTablesOption(text: string): string[] {
  const tables = list(text);
  for (const t of tables)
    if (!/^[^.\s]+\.[^.\s]+$/.test(t) || (t.includes('*') && !isTablePattern(t)))
      throw new UsageError(`--tables expects schema.table names or patterns (public.*), got '${t}'`);
  return tables;
}

/** `--exclude-tables`: schema.table patterns left out of the `--tables` patterns. */
export function parseExcludeTablesOption(text: string): string[] {
  const tables = list(text);
  for (const t of tables) if (!isTablePattern(t)) throw new UsageError(`--exclude-tables expects schema.table patterns (public.audit_*), got '${t}'`);
  return tables;
}

/**
 * The table settings the options name, unvalidated, and where they came from (the
 * `--table-config` file, else `--tables`): the file's entries, then a rule per pattern of
 * `--tables` and an entry per name the file does not already configure.
 */
export async function tableSettingEntries(o: {
  tables: readonly string[];
  excludeTables: readonly string[];
  tableConfig: string | null;
}): Promise<{ entries: unknown[]; origin: string }> {
  const entries: unknown[] = [];
  let origin = '--tables';
  if (o.tableConfig) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(await readFile(o.tableConfig, 'utf8'));
    } catch (err) {
      throw new UsageError(`--table-config ${o.tableConfig}: ${(err as Error).message}`);
    }
    if (!Array.isArray(parsed)) throw new UsageError(`--table-config ${o.tableConfig}: expected a JSON array of table settings`);
    entries.push(...parsed);
    origin = o.tableConfig;
  }
  for (const t of o.tables) {
    if (t.includes('*')) entries.push({ match: t, excludeTables: [...o.excludeTables] });
    else if (!entries.some((c) => (c as { table?: unknown }).table === t)) entries.push({ table: t });
  }
  return { entries, origin };
}
