import { describe, expect, it } from 'vitest';
import { keyText, type Row } from '../../../lambda/core/shared/event.ts';
import { keyValueText } from '../../../lambda/core/shared/json-exact.ts';

/** keyText as it was written first, for any number of columns: the one-column path must give the same text. */
const reference = (key: Row): string =>
  JSON.stringify(
    Object.keys(key)
      .sort()
      .map((k) => {
        const v = key[k];
        return [k, v === null || typeof v === 'object' || v === undefined ? v : keyValueText(v)];
      }),
  );

describe('keyText', () => {
  it('gives the text of the general path for one column and many, over random keys', () => {
    const seed = Number(process.env.CDC_TEST_SEED ?? Date.now() % 1_000_000);
    let x = seed;
    const rnd = (n: number) => ((x = (x * 1103515245 + 12345) % 2 ** 31), x % n);
    const names = ['id', 'Id', 'a b', 'ключ', '"q"', '__proto__', 'z\\', ''];
    const values = (): Row[string] | undefined =>
      [
        rnd(1e9),
        -rnd(1000) / 8,
        `${rnd(1e6)}`,
        '9007199254740993',
        'é "quoted" \\ \u0001 ☃',
        true,
        false,
        null,
        undefined,
        { a: [1, 'b'] },
        [rnd(5), null],
        '',
        0,
      ][rnd(13)] as Row[string] | undefined;
    let runs = 0;
    for (let i = 0; i < 3000; i++) {
      const key: Row = {};
      const n = 1 + rnd(3);
      for (let c = 0; c < n; c++)
        Object.defineProperty(key, names[rnd(names.length)]!, { value: values(), enumerable: true, writable: true, configurable: true });
      expect(keyText(key), `seed ${seed}, key ${i}: ${JSON.stringify(key)}`).toBe(reference(key));
      runs++;
    }
    console.log(`keyText: ${runs} random keys, seed ${seed}`);
  });

  it('writes one column as the general path does', () => {
    expect(keyText({ id: 5 })).toBe('[["id","5"]]');
    expect(keyText({ id: '5' })).toBe(keyText({ id: 5 }));
    expect(keyText({ id: null })).toBe('[["id",null]]');
    expect(keyText({ b: 1, a: 'x' })).toBe('[["a","x"],["b","1"]]');
  });
});
