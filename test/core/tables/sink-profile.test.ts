/**
 * What a table's sinks can hold decides what onboarding refuses (lambda/core/tables/sink-profile.ts;
 * docs/onboarding.md, "Names"): numeric beyond 38 digits per warehouse engine, and which of two
 * names that fold together in a sink is carried.
 */
import { describe, expect, it } from 'vitest';
import { nameTwinRefusals, registrationOrder, warehouseTypeRefusal } from '../../../lambda/core/tables/sink-profile.ts';

describe('sink profile', () => {
  it('a PostgreSQL warehouse carries numeric of any precision and scale; Redshift and an unknown engine refuse beyond 38 digits or a scale outside 0..p', () => {
    for (const t of ['numeric(50,2)', 'numeric(5,-2)', 'numeric(1000,999)', 'numeric(38,4)', 'numeric', 'numeric(50,2)[]'])
      expect(warehouseTypeRefusal({ warehouse: 'postgres', search: false }, t), t).toBeNull();
    expect(warehouseTypeRefusal({ warehouse: 'redshift', search: false }, 'numeric(50,2)')).toMatch(
      /^Redshift: precision 50 is beyond the warehouse's 38 digits/,
    );
    expect(warehouseTypeRefusal({ warehouse: 'redshift', search: false }, 'numeric(5,-2)')).toMatch(/scale -2 is outside 0\.\.5/);
    expect(warehouseTypeRefusal({ warehouse: 'any', search: false }, 'numeric(39,0)')).toMatch(/engine is not known; a PostgreSQL warehouse carries it/);
    for (const w of ['redshift', 'any'] as const) {
      expect(warehouseTypeRefusal({ warehouse: w, search: false }, 'numeric(38,4)')).toBeNull();
      expect(warehouseTypeRefusal({ warehouse: w, search: false }, 'numeric')).toBeNull();
    }
    expect(warehouseTypeRefusal({ warehouse: null, search: true }, 'numeric(50,2)')).toBeNull();
  });

  it('of names that fold together the first in registration order is carried, each other refused naming it', () => {
    const tables = ['public.orders', 'public.ORDERS', 'public.Orders', 'public.Zoë', 'public.zoë', 'Public.orders'];
    const order = registrationOrder(
      tables,
      new Map([
        ['public.ORDERS', '2026-01-02'],
        ['public.orders', '2026-01-03'],
      ]),
      new Set(['public.zoë']),
    );
    expect(order).toEqual(['public.ORDERS', 'public.orders', 'public.zoë', 'Public.orders', 'public.Orders', 'public.Zoë']);
    const rs = nameTwinRefusals({ warehouse: 'redshift', search: false }, 'src', order);
    // A warehouse schema is per source schema: Public and public are two on PostgreSQL, one on Redshift.
    expect(Object.fromEntries([...rs].map(([t, r]) => [t, r.first]))).toEqual({
      'Public.orders': 'public.ORDERS',
      'public.orders': 'public.ORDERS',
      'public.Orders': 'public.ORDERS',
      'public.Zoë': 'public.zoë',
    });
    expect(nameTwinRefusals({ warehouse: 'postgres', search: false }, 'src', order).size).toBe(0);
    // Search index names fold ASCII letters: Zoë and zoë, Public and public fold together there; Ä and ä do not.
    const search = nameTwinRefusals({ warehouse: 'postgres', search: true }, 'src', [...order, 'public.Ä', 'public.ä']);
    expect([...search.keys()].sort()).toEqual(['Public.orders', 'public.Orders', 'public.Zoë', 'public.orders']);
    expect(search.get('public.Orders')!.reason).toMatch(/public\.Orders and public\.ORDERS \(registered first\) would be one table in the search/);
  });
});
