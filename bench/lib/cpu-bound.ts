/**
 * The bound a machine's cores put on a path's rate, from the CPU the path spent: with every core
 * busy and no waits, `cores` core-seconds a second over the CPU each event took. A path whose CPU
 * per event is above cores ÷ a reference's rate cannot reach that rate on this machine, whatever
 * it overlaps (docs/performance-log.md, "69. The cores' bound on the apply line").
 */

/** Events per second `cores` cores allow a path that spent `cpuMs` of CPU (every process of it) on `events` events. */
export function coreBoundRate(events: number, cpuMs: number, cores: number): number {
  if (!(events > 0) || !(cpuMs > 0) || !(cores > 0))
    throw new RangeError(`coreBoundRate: events ${events}, CPU ${cpuMs} ms and cores ${cores} must be positive`);
  return (cores * events * 1000) / cpuMs;
}

/** CPU microseconds per event. */
export function cpuMicrosPerEvent(events: number, cpuMs: number): number {
  if (!(events > 0)) throw new RangeError(`cpuMicrosPerEvent: events ${events} must be positive`);
  return (cpuMs * 1000) / events;
}
