/** The warehouse sink's merge policy from the environment its construct sets (docs/warehouse-apply.md, "The merge"). */
import { EnvName } from '../../contracts/env.ts';
import { ConfigurationError } from '../core/shared/errors.ts';
import { validateMergePolicy, type MergePolicy } from '../core/warehouse/merge-policy.ts';

/** The merge policy the construct sets (`WarehouseSink` props `mergeMaxRows`, `mergeMaxAge`, `mergeOnSchedule`); unset: the defaults. */
export function mergePolicyFromEnvironment(): Partial<MergePolicy> {
  const out: Partial<MergePolicy> = {};
  const rows = process.env[EnvName.MERGE_MAX_ROWS];
  const age = process.env[EnvName.MERGE_MAX_AGE_MS];
  const onSchedule = process.env[EnvName.MERGE_ON_SCHEDULE];
  if (rows) out.maxRows = Number(rows);
  if (age) out.maxAgeMs = Number(age);
  if (onSchedule !== undefined && onSchedule !== '') {
    if (onSchedule !== 'true' && onSchedule !== 'false')
      throw new ConfigurationError(`${EnvName.MERGE_ON_SCHEDULE} must be true or false, got ${JSON.stringify(onSchedule)}`);
    out.inline = onSchedule !== 'true';
  }
  try {
    return validateMergePolicy(out, `${EnvName.MERGE_MAX_ROWS} / ${EnvName.MERGE_MAX_AGE_MS}`);
  } catch (err) {
    throw new ConfigurationError((err as Error).message);
  }
}
