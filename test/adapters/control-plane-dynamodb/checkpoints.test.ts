/** The local poller's checkpoints in the DynamoDB control plane against DynamoDB Local. */
import { describe, expect, it } from 'vitest';
import { cp, useControlTable } from './fixture.ts';

useControlTable();

describe('checkpoints', () => {
  it('stores one sequence number per consumer and shard', async () => {
    expect(await cp.getCheckpoint('normalizer', 'shardId-000000000000')).toBeNull();
    await cp.putCheckpoint('normalizer', 'shardId-000000000000', '49590338271490256608559692538361571095921575989136588898');
    await cp.putCheckpoint('normalizer', 'shardId-000000000001', '1');
    await cp.putCheckpoint('wh', 'shardId-000000000000', '2');
    expect(await cp.getCheckpoint('normalizer', 'shardId-000000000000')).toBe('49590338271490256608559692538361571095921575989136588898');
    await cp.putCheckpoint('normalizer', 'shardId-000000000000', '3');
    expect(await cp.getCheckpoint('normalizer', 'shardId-000000000000')).toBe('3');
    expect(await cp.getCheckpoint('wh', 'shardId-000000000000')).toBe('2');
    await expect(cp.putCheckpoint('wh', 's', '')).rejects.toThrow(/sequenceNumber/);
  });
});
