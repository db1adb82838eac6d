/**
 * kinesalite: a Kinesis Data Streams stand-in, run in-process. Clients must use the HTTP/1.1
 * handler (see lambda/adapters/aws-clients.ts). It has no ON_DEMAND mode: give a shard count.
 */
import { createRequire } from 'node:module';
import type { Server } from 'node:http';

export interface KinesaliteOptions {
  /** Port on 127.0.0.1. @default a free port */
  port?: number;
  /** Folder for a LevelDB store (streams and records survive restarts). @default in memory */
  path?: string;
}

export interface Kinesalite {
  readonly endpoint: string;
  readonly port: number;
  stop(): Promise<void>;
}

type KinesaliteFactory = (opts: Record<string, unknown>) => Server;

export async function startKinesalite(options: KinesaliteOptions = {}): Promise<Kinesalite> {
  const require = createRequire(import.meta.url);
  const kinesalite = require('kinesalite') as KinesaliteFactory;
  const server = kinesalite({
    createStreamMs: 0,
    deleteStreamMs: 0,
    updateStreamMs: 0,
    shardLimit: 100,
    ...(options.path ? { path: options.path } : {}),
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, '127.0.0.1', () => resolve());
  });
  const addr = server.address();
  if (!addr || typeof addr !== 'object') throw new Error('kinesalite did not report its port');
  return {
    endpoint: `http://127.0.0.1:${addr.port}`,
    port: addr.port,
    async stop(): Promise<void> {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
