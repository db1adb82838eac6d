import { describe, expect, it } from 'vitest';
import { StopSignals } from '../../bin/cli/local-signals.ts';

describe('StopSignals (docs/local.md, "Stopping")', () => {
  it('the first signal asks for a clean stop: requested resolves, abort fires, a line says what happens; nothing exits', async () => {
    const said: string[] = [];
    const exits: number[] = [];
    const s = new StopSignals(
      (t) => said.push(t),
      (c) => void exits.push(c),
    );
    expect(s.signal).toBeNull();
    expect(s.abort.signal.aborted).toBe(false);
    s.receive('SIGTERM');
    expect(await s.requested).toBe('SIGTERM');
    expect(s.signal).toBe('SIGTERM');
    expect(s.abort.signal.aborted).toBe(true);
    expect(said.join('')).toMatch(/SIGTERM received: stopping cleanly/);
    expect(exits).toEqual([]);
  });

  it('a second signal tells the servers to stop and exits with 130, even when telling them fails', () => {
    const order: string[] = [];
    const s = new StopSignals(
      () => undefined,
      (c) => void order.push(`exit ${c}`),
    );
    s.onForce(() => {
      order.push('force');
      throw new Error('a server was gone already');
    });
    s.receive('SIGINT');
    expect(order).toEqual([]);
    expect(() => s.receive('SIGINT')).toThrow('a server was gone already');
    expect(order).toEqual(['force', 'exit 130']);
    expect(s.signal).toBe('SIGINT');
  });

  it('lines go where sayWith points them; install and uninstall add and remove the process listeners', () => {
    const first: string[] = [];
    const later: string[] = [];
    const s = new StopSignals(
      (t) => first.push(t),
      () => undefined,
    );
    const before = [process.listenerCount('SIGINT'), process.listenerCount('SIGTERM')];
    s.install();
    expect([process.listenerCount('SIGINT'), process.listenerCount('SIGTERM')]).toEqual([before[0]! + 1, before[1]! + 1]);
    s.sayWith((t) => later.push(t));
    process.emit('SIGINT', 'SIGINT');
    expect(s.signal).toBe('SIGINT');
    expect(first).toEqual([]);
    expect(later.join('')).toMatch(/SIGINT received/);
    s.uninstall();
    expect([process.listenerCount('SIGINT'), process.listenerCount('SIGTERM')]).toEqual(before);
  });
});
