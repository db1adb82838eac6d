/**
 * The EMF lines the handlers' Powertools metrics write to stdout (one JSON object per line),
 * captured with a spy on `process.stdout.write` (restore it with `vi.restoreAllMocks()`): each
 * metric's values with their dimensions.
 */
import { vi } from 'vitest';

export interface Emf {
  _aws: { CloudWatchMetrics: { Namespace: string; Dimensions: string[][]; Metrics: { Name: string; Unit: string }[] }[] };
  [k: string]: unknown;
}

/** Collects the EMF lines written to stdout (Powertools writes them there, one JSON object per line). */
export function captureEmf(): { lines: Emf[]; metric(name: string): { value: number; dims: Record<string, string>; dimNames: string[] }[] } {
  const lines: Emf[] = [];
  const write = process.stdout.write.bind(process.stdout);
  vi.spyOn(process.stdout, 'write').mockImplementation(((chunk: string | Uint8Array, ...rest: unknown[]) => {
    const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
    let captured = false;
    for (const line of text.split('\n')) {
      if (!line.startsWith('{') || !line.includes('"_aws"')) continue;
      lines.push(JSON.parse(line) as Emf);
      captured = true;
    }
    return captured ? true : (write as (...a: unknown[]) => boolean)(chunk, ...rest);
  }) as typeof process.stdout.write);
  return {
    lines,
    metric(name) {
      const out: { value: number; dims: Record<string, string>; dimNames: string[] }[] = [];
      for (const l of lines) {
        const def = l._aws.CloudWatchMetrics[0]!;
        if (!def.Metrics.some((m) => m.Name === name)) continue;
        const dimNames = def.Dimensions[0] ?? [];
        const values = l[name];
        for (const v of Array.isArray(values) ? values : [values])
          out.push({ value: Number(v), dims: Object.fromEntries(dimNames.map((d) => [d, String(l[d])])), dimNames });
      }
      return out;
    },
  };
}
