// errors.test.mjs — bad input throws LacunaError (status name, lacuna_last_error's message) and
// leaves the context and the other branches usable.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { LacunaError, Model } from '../index.js';
import { PROMPT, drain, smallContext, testModel } from './helpers.mjs';

function throwsStatus(fn, status, pattern = /./) {
  assert.throws(fn, (e) => {
    assert.ok(e instanceof LacunaError && e instanceof Error, String(e));
    assert.equal(e.status, status, e.message);
    assert.match(e.message, pattern);
    return true;
  });
}

test('bad input throws LacunaError and everything stays usable', () => {
  const model = testModel();
  const ctx = smallContext();
  const a = ctx.createBranch({ maxTokens: 6 });
  a.prefillText(PROMPT);
  const b = a.fork();
  const want = drain(b);

  // Bad token ids: outside the vocabulary (the library says so), or not an int32 at all.
  throwsStatus(() => a.prefill([model.nVocab + 1]), 'LACUNA_ERR_INVALID_ARGUMENT', /lacuna_branch_prefill/);
  throwsStatus(() => a.commit(model.nVocab + 1), 'LACUNA_ERR_INVALID_ARGUMENT', /lacuna_branch_commit/);
  throwsStatus(() => a.commit(1.5), 'LACUNA_ERR_INVALID_ARGUMENT');
  throwsStatus(() => a.prefill([1, 'x']), 'LACUNA_ERR_INVALID_ARGUMENT');
  throwsStatus(() => ctx.store.commit([[a, -5]]), 'LACUNA_ERR_INVALID_ARGUMENT');

  // Another context's branch in one batch, a branch listed twice.
  const other = smallContext();
  const foreign = other.createBranch({ maxTokens: 2 });
  foreign.prefillText(PROMPT);
  throwsStatus(() => ctx.store.step([a, foreign]), 'LACUNA_ERR_INVALID_ARGUMENT', /another context/);
  throwsStatus(() => ctx.store.step([a, a]), 'LACUNA_ERR_INVALID_ARGUMENT', /twice/);
  throwsStatus(() => ctx.store.commit([[a, 1], [foreign, 1]]), 'LACUNA_ERR_INVALID_ARGUMENT');
  assert.throws(() => ctx.store.step([a, {}]), TypeError);
  assert.equal(drain(foreign).length, 2);

  // Too many branches: 8 sequences, then LIMIT for create and fork.
  const more = [];
  for (let i = ctx.store.available(); i > 0; --i) more.push(ctx.createBranch());
  assert.equal(ctx.store.available(), 0);
  throwsStatus(() => ctx.createBranch(), 'LACUNA_ERR_LIMIT');
  throwsStatus(() => a.fork(), 'LACUNA_ERR_LIMIT');
  for (const m of more) m.free();
  const two = smallContext({ nBranches: 2 });
  two.createBranch();
  two.createBranch();
  throwsStatus(() => two.createBranch(), 'LACUNA_ERR_LIMIT');
  assert.equal(ctx.store.available(), 6);

  // Bad constraints, calls in the wrong state, missing files.
  throwsStatus(() => a.setGrammar('root ::= ('), 'LACUNA_ERR_PARSE');
  throwsStatus(() => a.setJsonSchema('{"type": 5}'), 'LACUNA_ERR_SCHEMA');
  throwsStatus(() => a.setGrammar('root ::= "x"', { triggers: [''] }), 'LACUNA_ERR_INVALID_ARGUMENT');
  const fresh = ctx.createBranch({ maxTokens: 4 });
  throwsStatus(() => fresh.produce(), 'LACUNA_ERR_STATE');
  throwsStatus(() => fresh.next(), 'LACUNA_ERR_STATE');
  throwsStatus(() => fresh.loadState('/no/such/branch.lkv'), 'LACUNA_ERR_NOT_FOUND');
  throwsStatus(() => new Model('/no/such/model.gguf'), 'LACUNA_ERR_NOT_FOUND', /model\.gguf/);
  throwsStatus(() => ctx.createBranch({ maxTokens: -1 }), 'LACUNA_ERR_INVALID_ARGUMENT');

  // Everything still works: the branch generates what its fork did before the errors.
  assert.deepEqual(drain(a), want);
  fresh.prefillText(PROMPT);
  assert.equal(drain(fresh).length, 4);
});
