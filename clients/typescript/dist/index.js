// coffer-client: the TypeScript client of coffer's HTTP/JSON API
// (docs/clients.md).
//
//   import { Client } from "coffer-client";
//   const c = new Client({ baseUrl: "http://127.0.0.1:8080", apiKey });
//   const trx = await c.change(1, 42, { idempotency_key: "welcome-42", ops: [{ currency: "gold", amount: 100 }] });
export { Client } from "./client.js";
export { CofferError, RETRYABLE, UnexpectedAnswer } from "./errors.js";
