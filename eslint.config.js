// Type-checked linting of the TypeScript tree (npm run lint, part of npm test). The rules kept are those that
// catch real mistakes here: promises left floating or passed where a callback is expected, awaits of
// non-promises, switches that miss a case, unused code. Style is Prettier's.
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'dist/',
      'client/dist/',
      'client/src/schema.d.ts',
      'node_modules/',
      'scratch/',
      'data/',
      'test-artifacts/',
      'eslint.config.js',
    ],
  },
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: {
        // The test reporter is plain JavaScript (the runner loads reporters without tsx): linted outside tsconfig.
        projectService: { allowDefaultProject: ['test/helpers/*.mjs'] },
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      '@typescript-eslint/switch-exhaustiveness-check': ['error', { considerDefaultExhaustiveForUnions: true }],
      // node:test's test() and describe() return promises that the runner itself waits for.
      '@typescript-eslint/no-floating-promises': [
        'error',
        {
          allowForKnownSafeCalls: [{ from: 'package', package: 'node:test', name: ['test', 'describe', 'it', 'suite', 'before', 'after'] }],
        },
      ],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      // A variable read by a closure made before its one assignment (a signal handler) must stay let.
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
      // An async method without an await is how a synchronous implementation keeps a Promise interface.
      '@typescript-eslint/require-await': 'off',
    },
  },
  {
    // Migrations are written against Kysely<any>, as Kysely advises: they must not depend on today's schema type.
    files: ['src/store/migrations/**', 'src/store/postgres/own-schema-dialect.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    // Tests and benchmarks read JSON answers loosely, as a client would; the checks that protect the
    // service's own types do not pay there.
    files: ['test/**', 'bench/**', 'scripts/**'],
    rules: {
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      '@typescript-eslint/restrict-template-expressions': 'off',
    },
  },
);
