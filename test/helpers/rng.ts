/** The randomized tests' generator: mulberry32, the same seed, the same numbers in [0, 1) (local/seeded-random.ts). */
export { seededRandom as rng } from '../../local/seeded-random.ts';
