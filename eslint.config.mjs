// ESLint (flat config): `npm run lint`, run by `npm test` before the suites.
import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'dist/**',
      'soak/.build/**',
      'bench/.dist-*/**',
      'coverage/**',
      'docs/api/**',
      'node_modules/**',
      'spec/artifacts/**',
      'lib/dashboard/public/**',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { ...globals.node } },
    rules: {
      // The library reports through events and its logger; a stray console.log is a bug there.
      'no-console': 'error',
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' },
      ],
    },
  },
  {
    // The library: a promise nobody awaits or handles is a lost error or an unhandled rejection.
    files: ['lib/**/*.ts'],
    languageOptions: { parserOptions: { project: './tsconfig.json', tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { arguments: false } }],
    },
  },
  {
    // Tests, benchmarks, examples and tools print what they measure, and plain JS files are CommonJS.
    files: ['spec/**', 'bench/**', 'soak/**', 'examples/**', 'tools/**', 'bin/**'],
    rules: { 'no-console': 'off' },
  },
  {
    files: ['**/*.js', '**/*.cjs'],
    languageOptions: { sourceType: 'commonjs', globals: { ...globals.node } },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
  {
    files: ['spec/**/*.ts'],
    languageOptions: { globals: { ...globals.jest } },
  },
);
