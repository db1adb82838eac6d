import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['node_modules/**', 'cdk.out/**', 'assets/**', 'dist/**', '.cdc-local/**', 'bench/results/**', 'coverage/**'] },
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'error',
      'no-console': 'off',
    },
  },
  {
    // The house rule: constructs never import runtime code; the bundler turns handlers into assets.
    files: ['lib/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        { patterns: [{ group: ['**/lambda/**', '**/local/**'], message: 'lib/ never imports runtime code; share constants through contracts/.' }] },
      ],
    },
  },
  {
    // Pure logic: no I/O, no adapters.
    files: ['lambda/core/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: ['pg', 'fs', 'node:fs', 'net', 'node:net', 'http', 'node:http', 'child_process', 'node:child_process'],
          patterns: [{ group: ['@aws-sdk/*', '**/adapters/**', '**/handlers/**', '**/local/**'], message: 'lambda/core is pure logic: no I/O, no adapters.' }],
        },
      ],
    },
  },
  {
    // Handlers only wire, and never import one another (a handler is a bundle of its own; a sibling
    // import drags the other's dependencies into it): shared plumbing lives in lambda/runtime/.
    files: ['lambda/handlers/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['./*', '../handlers/*', '**/lambda/handlers/*'],
              message: 'a handler never imports another handler: share plumbing through lambda/runtime/, workflows through lambda/core/.',
            },
          ],
        },
      ],
    },
  },
  {
    // The plumbing handlers share is not a handler and never reaches back into one.
    files: ['lambda/runtime/**/*.ts', 'lambda/adapters/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [{ group: ['**/handlers/**'], message: 'lambda/runtime and lambda/adapters never import a handler.' }] }],
    },
  },
);
