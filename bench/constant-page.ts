/**
 * The constant page of the ceiling and of the framework floor: 20 plants, the size and shape of a Plant Store
 * first page. One definition, so that the two answer exactly the same body.
 */
export const CONSTANT_PAGE = JSON.stringify(
  Array.from({ length: 20 }, (_, i) => (i % 3 === 2 ? { name: `Ficus #${i}` } : { name: `Monstera #${i}`, tag: 'tropical' })),
);
