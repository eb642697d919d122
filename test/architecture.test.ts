import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, it } from 'node:test';
import ts from 'typescript';

// The layout's rules, checked on the source: the catalogue's rules depend on nothing of the service, the store on
// nothing above it, migrations on nothing that can change after their release, and no class grows into a god class.

const SRC = resolve(import.meta.dirname, '../src');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? sourceFiles(join(dir, entry.name)) : entry.name.endsWith('.ts') ? [join(dir, entry.name)] : [],
  );
}

const FILES = sourceFiles(SRC).map((path) => ({
  path,
  name: relative(SRC, path),
  source: ts.createSourceFile(path, readFileSync(path, 'utf8'), ts.ScriptTarget.Latest, true),
}));

/** What a file imports: packages by name, modules of the service by their path under src/. */
function importsOf(file: (typeof FILES)[number]): string[] {
  const found: string[] = [];
  const visit = (node: ts.Node) => {
    const specifier =
      (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier)
        ? node.moduleSpecifier.text
        : ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword && ts.isStringLiteral(node.arguments[0]!)
          ? node.arguments[0].text
          : undefined;
    if (specifier !== undefined) found.push(specifier.startsWith('.') ? relative(SRC, resolve(dirname(file.path), specifier)) : specifier);
    ts.forEachChild(node, visit);
  };
  visit(file.source);
  return found;
}

const inside = (folder: string) => FILES.filter((f) => f.name.startsWith(`${folder}/`));
const local = (spec: string) => spec.endsWith('.js');

describe('the layout', () => {
  it('the catalogue (the product rules) imports only itself and Node or library modules', () => {
    for (const file of inside('catalogue')) {
      for (const spec of importsOf(file).filter(local)) assert.ok(spec.startsWith('catalogue/'), `${file.name} imports ${spec}`);
    }
  });

  it('the store imports nothing from the layers above it', () => {
    for (const file of inside('store')) {
      for (const spec of importsOf(file).filter(local)) {
        assert.ok(!/^(auth|cache|http|cli|webhooks|metrics)\//.test(spec) && spec !== 'app.js', `${file.name} imports ${spec}`);
      }
    }
  });

  it('a migration imports only other migrations and libraries, never running code that can change after its release', () => {
    for (const file of inside('store/migrations')) {
      for (const spec of importsOf(file).filter(local)) assert.ok(spec.startsWith('store/migrations/'), `${file.name} imports ${spec}`);
    }
  });

  it('a consumer takes the roles it uses, never the whole Store; only the composition roots hold it', () => {
    // The roots build the app or run a command: they hand each part its role.
    const ROOTS = new Set(['app.ts', 'server.ts', 'cli/context.ts']);
    for (const file of FILES.filter((f) => !f.name.startsWith('store/') && !ROOTS.has(f.name))) {
      const visit = (node: ts.Node) => {
        if (ts.isTypeReferenceNode(node) && node.typeName.getText() === 'Store') {
          // `Pick<Store, 'users'>` and `Store['listing']` name roles; a bare `Store` is the whole record.
          const parent = node.parent;
          const picked = ts.isTypeReferenceNode(parent) && parent.typeName.getText() === 'Pick';
          assert.ok(picked || ts.isIndexedAccessTypeNode(parent), `${file.name} takes the whole Store: ${parent.getText()}`);
        }
        // A command's callback names the roles it uses: `withStore(cmd, ({ groups }) => …)`.
        if (ts.isCallExpression(node) && node.expression.getText() === 'withStore') {
          const run = node.arguments[1];
          assert.ok(run && (ts.isArrowFunction(run) || ts.isFunctionExpression(run)), `${file.name}: withStore without a callback`);
          const [param] = run.parameters;
          assert.ok(
            param === undefined || ts.isObjectBindingPattern(param.name),
            `${file.name} takes the whole Store: ${param?.getText()}`,
          );
        }
        ts.forEachChild(node, visit);
      };
      visit(file.source);
    }
  });

  it('no code outside the seam asks which database it runs on', () => {
    // Each database's folder is its side of the seam; migrations are frozen as released; the places that choose
    // a backend from the configuration (open-store.ts, the settings, doctor's checks) and the type naming them may.
    const CHOOSERS = /^(store\/(sqlite|postgres|migrations)\/|store\/(open-store|schema)\.ts$|settings\.ts$|config\.ts$|cli\/doctor\/)/;
    for (const file of FILES.filter((f) => !CHOOSERS.test(f.name))) {
      const visit = (node: ts.Node) => {
        if (ts.isStringLiteral(node))
          assert.ok(!['sqlite', 'postgres'].includes(node.text), `${file.name} names a database: ${node.parent.getText()}`);
        if (ts.isPropertyAccessExpression(node) && node.name.text === 'backend' && ts.isBinaryExpression(node.parent)) {
          assert.fail(`${file.name} branches on the backend: ${node.parent.getText()}`);
        }
        if (ts.isCallExpression(node) && node.expression.getText() === 'isPostgresUrl')
          assert.fail(`${file.name} branches on the database URL`);
        ts.forEachChild(node, visit);
      };
      visit(file.source);
    }
  });

  it('no module imports itself through others (no import circle)', () => {
    // Module paths end in .js in imports and .ts on disk.
    const graph = new Map(FILES.map((f) => [f.name.replace(/\.ts$/, '.js'), importsOf(f).filter(local)]));
    const done = new Set<string>();
    const visit = (name: string, path: string[]): void => {
      const at = path.indexOf(name);
      assert.ok(at === -1, `import circle: ${[...path.slice(at), name].join(' -> ')}`);
      if (done.has(name)) return;
      for (const next of graph.get(name) ?? []) visit(next, [...path, name]);
      done.add(name);
    };
    for (const name of graph.keys()) visit(name, []);
  });

  it('no class has more than 25 members, and the store has no abstract class', () => {
    for (const file of FILES) {
      const visit = (node: ts.Node) => {
        if (ts.isClassLike(node)) {
          const name = `${file.name}: ${node.name?.text ?? '(anonymous class)'}`;
          const parameterProperties = node.members
            .filter(ts.isConstructorDeclaration)
            .flatMap((c) => c.parameters.filter((p) => ts.getModifiers(p)?.length));
          const members = node.members.filter((m) => !ts.isConstructorDeclaration(m) && !ts.isSemicolonClassElement(m));
          assert.ok(
            members.length + parameterProperties.length <= 25,
            `${name} has ${members.length + parameterProperties.length} members`,
          );
          const abstract = ts.getModifiers(node)?.some((m) => m.kind === ts.SyntaxKind.AbstractKeyword);
          assert.ok(!(abstract && file.name.startsWith('store/')), `${name} is abstract`);
        }
        ts.forEachChild(node, visit);
      };
      visit(file.source);
    }
  });
});
