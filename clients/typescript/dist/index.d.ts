export { Client } from "./client.js";
export type { BalancesQuery, BatchResult, ClientOptions, FinlogQuery, RevenueQuery } from "./client.js";
export { CofferError, RETRYABLE, UnexpectedAnswer } from "./errors.js";
export type * from "./models.js";
