// The client against the published contract (docs/schema/, generated from the server's protocol
// types): the commands it knows, and the success `data` it reads for each, are the schema's, so a
// change of the command table fails here before it reaches a user.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { COMMAND_TYPES, RESULTS, jsonObject } from '../src/schema.js';

const load = (name) =>
  JSON.parse(readFileSync(new URL(`../../../docs/schema/${name}.schema.json`, import.meta.url), 'utf8'));
const commandSchema = load('Command');
const definitions = { ...commandSchema.$defs, ...load('CommandResult').$defs };

/** Each command of the schema, in order: its type and the definition of its success `data`. */
const commands = commandSchema.oneOf.map((branch) => ({
  type: branch.properties.type.const,
  result: branch['x-result-data'].$ref.replace('#/$defs/', ''),
}));

test('the client knows exactly the commands of the schema, in its order', () => {
  assert.deepEqual(COMMAND_TYPES, commands.map(({ type }) => type));
  assert.deepEqual(Object.keys(RESULTS).sort(), [...COMMAND_TYPES].sort());
});

test("each command's success data is read with the shape the schema gives it", () => {
  for (const { type, result } of commands) {
    const definition = definitions[result];
    assert.ok(definition, `${type}: ${result} is defined`);
    if (type === 'session.read') {
      // Read as any object on purpose (see RESULTS), whatever the schema adds to it.
      assert.equal(RESULTS[type], jsonObject);
      continue;
    }
    const { shape } = RESULTS[type];
    assert.ok(shape, `${type}: the validator states its shape`);
    assert.deepEqual([...shape.required].sort(), [...definition.required].sort(), `${type}: required keys`);
    assert.deepEqual(
      [...shape.required, ...shape.optional].sort(),
      Object.keys(definition.properties).sort(),
      `${type}: allowed keys`,
    );
  }
});
