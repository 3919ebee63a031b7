// The tests run against a real coffer: TestClients in cmd/coffer starts
// `coffer dev` and passes its address and key in COFFER_URL and
// COFFER_API_KEY.

import { randomInt, randomUUID } from "node:crypto";

export const NS = 1;

function env(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: COFFER_URL and COFFER_API_KEY name the coffer to test (TestClients in cmd/coffer sets them)`);
  return v;
}

export const url = env("COFFER_URL");
export const apiKey = env("COFFER_API_KEY");

/** player is a new player: the stack is shared with the other client's tests. */
export function player(): number {
  return randomInt(1, 2 ** 47);
}

export function key(what: string): string {
  return `${what}-${randomUUID()}`;
}
