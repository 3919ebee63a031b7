// The README's story, through the client: grant, spend, hold, exchange,
// refund, the batch API, errors with their codes; the retries (Retry.cs)
// and the models' fields (Contract.cs). It runs against a real coffer: TestClients in cmd/coffer
// starts `coffer dev` and passes its address and key in COFFER_URL and
// COFFER_API_KEY. It exits 1 if any test fails.

using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading.Tasks;
using Coffer;

internal static partial class Story
{
    private const int NS = 1;
    private static readonly Random Rng = new Random();
    private static string url;
    private static string apiKey;
    private static CofferClient client;

    private static int Main()
    {
        url = Environment.GetEnvironmentVariable("COFFER_URL");
        apiKey = Environment.GetEnvironmentVariable("COFFER_API_KEY");
        if (string.IsNullOrEmpty(url) || string.IsNullOrEmpty(apiKey))
        {
            Console.Error.WriteLine("COFFER_URL and COFFER_API_KEY name the coffer to test (TestClients in cmd/coffer sets them)");
            return 2;
        }
        var tests = new Dictionary<string, Func<Task>>
        {
            { "grant, spend and replay", GrantSpendReplay },
            { "hold: commit and rollback", HoldCommitRollback },
            { "exchange and refund", ExchangeRefund },
            { "errors carry their code", Errors },
            { "batch", Batch },
            { "revenue", Revenue },
            { "the models hold the document's fields", ModelsHoldTheDocumentsFields },
            { "a retry after overloaded, with the same key", RetryOverloaded },
            { "retries are bounded", RetriesBounded },
        };
        var failed = 0;
        using (client = new CofferClient(url, apiKey))
        {
            foreach (var t in tests)
            {
                try
                {
                    t.Value().GetAwaiter().GetResult();
                    Console.WriteLine("ok   " + t.Key);
                }
                catch (Exception e)
                {
                    failed++;
                    Console.WriteLine("FAIL " + t.Key + ": " + e);
                }
            }
        }
        Console.WriteLine(failed == 0 ? "PASS" : failed + " of " + tests.Count + " failed");
        return failed == 0 ? 0 : 1;
    }

    // Player is a new player: the stack is shared with the other clients' tests.
    private static long Player()
    {
        return 1 + (long)(Rng.NextDouble() * (1L << 47));
    }

    private static string Key(string what)
    {
        return what + "-" + Guid.NewGuid();
    }

    private static void Equal<T>(T want, T got, string what)
    {
        if (!EqualityComparer<T>.Default.Equals(want, got)) throw new Exception(what + ": got " + got + ", want " + want);
    }

    // EqualSeq is not an overload of Equal: with two sequences of one type,
    // Equal<T> would win and compare the sequences' references.
    private static void EqualSeq<T>(IEnumerable<T> want, IEnumerable<T> got, string what)
    {
        Equal(string.Join(", ", want), string.Join(", ", got), what);
    }

    private static void True(bool ok, string what)
    {
        if (!ok) throw new Exception(what);
    }

    private static async Task<CofferException> Refused(Func<Task> call)
    {
        try
        {
            await call();
        }
        catch (CofferException e)
        {
            return e;
        }
        throw new Exception("the call was accepted");
    }

    private static async Task GrantSpendReplay()
    {
        var p = Player();
        var order = new Purchase("steam", Guid.NewGuid().ToString(), 499, "USD");
        var grant = new Change(Key("grant"), new Op("gold", 500) { Kind = "paid", Purchase = order }, new Op("gold", 100))
        {
            Reason = "purchase",
            Meta = new Dictionary<string, object> { { "offer", 12L } },
        };
        var trx = await client.ChangeAsync(NS, p, grant);
        Equal("change committed False", trx.Kind + " " + trx.Status + " " + trx.Replay, "kind, status, replay");
        EqualSeq(new[] { "grant 500 True", "grant 100 False" }, trx.Ops.Select(op => op.Kind + " " + op.Amount + " " + op.Paid), "ops");
        Equal(order.OrderId + " 499 USD", trx.Ops[0].Purchase.OrderId + " " + trx.Ops[0].Purchase.Price + " " + trx.Ops[0].Purchase.Fiat, "purchase");
        Equal(12L, trx.Meta["offer"], "meta");

        var again = await client.ChangeAsync(NS, p, grant);
        True(again.Replay, "the same key again is a replay");
        Equal(trx.Id, again.Id, "the replay's id");

        var spend = await client.ChangeAsync(NS, p, new Change(Key("spend"), new Op("gold", -150)));
        Equal(450L, spend.Ops.Last().BalanceAfter, "balance after the spend");
        var balances = await client.GetBalancesAsync(NS, p, new BalancesQuery { Lots = true });
        Equal(450L, balances.Total("gold"), "gold");
        Equal(spend.Version, balances.Version, "version");
        Equal(450L, balances.Items[0].Lots.Sum(lot => lot.Amount), "the lots' sum");
        Equal(600L, (await client.GetBalancesAsync(NS, p, new BalancesQuery { At = trx.CreatedAt })).Total("gold"), "gold at the grant");
    }

    private static async Task HoldCommitRollback()
    {
        var p = Player();
        await client.ChangeAsync(NS, p, new Change(Key("grant"), new Op("gold", 100)));
        var begin = new Change(Key("hold"), new Op("gold", -30), new Op("silver", 5)) { Hold = true, HoldTtlSeconds = 60 };
        var held = await client.ChangeAsync(NS, p, begin);
        Equal("pending", held.Status, "status");
        True(held.HoldExpiresAt.HasValue, "a pending hold expires");
        EqualSeq(new[] { false, true }, held.Ops.Select(op => op.Pending), "pending ops");
        var done = await client.CommitAsync(NS, p, begin.IdempotencyKey);
        Equal("committed False", done.Status + " " + done.Replay, "commit");
        True((await client.CommitAsync(NS, p, begin.IdempotencyKey)).Replay, "a second commit is a replay");

        // A key is one segment of the path, whatever it holds.
        var other = Key("../hold %?");
        await client.ChangeAsync(NS, p, new Change(other, new Op("gold", -50)) { Hold = true });
        Equal("rolled_back", (await client.RollbackAsync(NS, p, other)).Status, "rollback");
        var err = await Refused(() => client.CommitAsync(NS, p, other));
        Equal("hold_not_pending 409", err.Code + " " + err.Status, "commit after rollback");
        Equal("rolled_back", (await client.GetTrxAsync(NS, p, other)).Status, "trx");
        var holds = await client.GetFinlogAsync(NS, p, new FinlogQuery { Kind = "hold", Status = "rolled_back" });
        EqualSeq(new[] { other }, holds.Items.Select(t => t.IdempotencyKey), "rolled back holds");
        var byKey = await client.GetFinlogAsync(NS, p, new FinlogQuery { IdempotencyKey = begin.IdempotencyKey });
        EqualSeq(new[] { "hold" }, byKey.Items.Select(t => t.Kind), "by key");
        var balances = await client.GetBalancesAsync(NS, p);
        Equal("70 5", balances.Total("gold") + " " + balances.Total("silver"), "gold and silver");
    }

    private static async Task ExchangeRefund()
    {
        var p = Player();
        var order = new Purchase("steam", Guid.NewGuid().ToString(), 999, "USD");
        var buy = await client.ChangeAsync(NS, p, new Change(Key("buy"), new Op("gold", 20) { Kind = "paid", Purchase = order }));
        True(buy.Emitter > 0, "a client's trx names its emitter");
        var claim = await client.GetOrderAsync(NS, "steam", order.OrderId);
        Equal(p + " " + buy.Emitter + " " + buy.IdempotencyKey, claim.PlayerId + " " + claim.Emitter + " " + claim.IdempotencyKey, "the order's claim");
        Equal("not_found", (await Refused(() => client.GetOrderAsync(NS, "steam", Guid.NewGuid().ToString()))).Code, "an unknown order");
        var ex = await client.ExchangeAsync(NS, p, new Exchange(Key("ex"), "gold", 5, "silver"));
        Equal("exchange", ex.Kind, "kind");
        Equal(500L, (await client.GetBalancesAsync(NS, p)).Total("silver"), "silver");
        var refund = await client.RefundAsync(NS, p, new Refund(Key("refund"), "steam", order.OrderId, "chargeback"));
        Equal("refund steam chargeback", refund.Kind + " " + refund.Refund.Store + " " + refund.Refund.Kind, "refund");
        var err = await Refused(() => client.RefundAsync(NS, p, new Refund(Key("refund"), "steam", order.OrderId, "refund")));
        Equal("already_refunded", err.Code, "a second refund");
        var page = await client.GetFinlogAsync(NS, p, new FinlogQuery { Limit = 2 });
        EqualSeq(new[] { "change", "exchange" }, page.Items.Select(t => t.Kind), "first page");
        True(page.NextCursor != "", "a cursor to the next page");
        var rest = await client.GetFinlogAsync(NS, p, new FinlogQuery { Cursor = page.NextCursor });
        EqualSeq(new[] { "refund" }, rest.Items.Select(t => t.Kind), "last page");
        Equal("", rest.NextCursor, "no cursor on the last page");
    }

    private static async Task Errors()
    {
        var p = Player();
        var waits = new List<TimeSpan>();
        var options = new CofferClientOptions(url, apiKey) { Sleep = (d, ct) => { waits.Add(d); return Task.FromResult(0); } };
        using (var c = new CofferClient(options))
        {
            var err = await Refused(() => c.ChangeAsync(NS, p, new Change(Key("spend"), new Op("gold", -1))));
            Equal("insufficient_funds 409 False", err.Code + " " + err.Status + " " + err.Retryable, "spend of nothing");
            True(err.RequestId != "", "a request id");
            err = await Refused(() => c.GetTrxAsync(NS, p, "no such key"));
            Equal("not_found", err.Code, "an unknown key");
            Equal(0, waits.Count, "a refusal that is not retryable is not retried");
            err = await Refused(() => c.CommitAsync(NS, p, ".."));
            Equal("invalid_argument 0", err.Code + " " + err.Status, "a key System.Uri cannot send in a path");
        }
        using (var c = new CofferClient(url, "coffer_wrong"))
        {
            var err = await Refused(() => c.GetBalancesAsync(NS, p));
            Equal("unauthenticated 401", err.Code + " " + err.Status, "a wrong key");
        }
    }

    private static async Task Batch()
    {
        var p = Player();
        var changes = new[]
        {
            new BatchChange(p, Key("season"), new Op("gold", 300)) { Reason = "season" },
            new BatchChange(p + 1, Key("season"), new Op("gold", 200)) { Reason = "season" },
            new BatchChange(p + 1, Key("spend"), new Op("gold", -1000)),
        };
        var results = await client.BatchAsync(NS, changes);
        EqualSeq(new[] { 201, 201, 409 }, results.Select(r => r.Status), "statuses");
        Equal(300L, results[0].Trx.Ops[0].BalanceAfter, "balance after");
        Equal("insufficient_funds", results[2].Error.Code, "the failed change's code");
        var again = await client.BatchAsync(NS, changes.Take(2));
        EqualSeq(results.Take(2).Select(r => "200 True " + r.Trx.Id), again.Select(r => r.Status + " " + r.Trx.Replay + " " + r.Trx.Id), "replays");
    }

    private static async Task Revenue()
    {
        var p = Player();
        var now = DateTimeOffset.UtcNow;
        var order = new Purchase("steam", Guid.NewGuid().ToString(), 100, "EUR");
        await client.ChangeAsync(NS, p, new Change(Key("buy"), new Op("silver", 10) { Kind = "paid", Purchase = order }));
        var lines = await client.GetRevenueAsync(NS, now.AddHours(-1), now.AddHours(1), "silver");
        var eur = lines.FirstOrDefault(l => l.Fiat == "EUR");
        True(eur != null && eur.Deposited >= 10 && eur.DepositedValue >= 100, "EUR deposited: " + lines.Count + " lines");
    }
}
