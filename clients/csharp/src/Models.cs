// The requests coffer takes and the answers it gives (docs/api.md), as
// classes with properties named after the API's fields. Times are
// DateTimeOffset (coffer keeps microseconds; a DateTimeOffset holds them).
// Amounts are long minor units. Kinds and statuses are the API's strings,
// so that a value added to the API later reads instead of failing. meta is
// any JSON object: a dictionary of strings, longs, doubles, bools, nulls,
// lists and dictionaries.

using System;
using System.Collections.Generic;
using System.Linq;

namespace Coffer
{
    // Requests.

    /// <summary>Purchase is the store order a paid grant credits (docs/api.md, Store orders).</summary>
    public sealed class Purchase
    {
        public Purchase(string store, string orderId, long price, string fiat)
        {
            Store = store;
            OrderId = orderId;
            Price = price;
            Fiat = fiat;
        }

        public string Store { get; private set; }
        public string OrderId { get; private set; }
        /// <summary>Price is the grant's share of the payment, in minor units of fiat.</summary>
        public long Price { get; private set; }
        /// <summary>Fiat is an ISO 4217 code.</summary>
        public string Fiat { get; private set; }

        internal IDictionary<string, object> ToWire()
        {
            return new Dictionary<string, object> { { "store", Store }, { "order_id", OrderId }, { "price", Price }, { "fiat", Fiat } };
        }

        internal static Purchase Read(IDictionary<string, object> o)
        {
            return new Purchase(Wire.Str(o, "store"), Wire.Str(o, "order_id"), Wire.Long(o, "price"), Wire.Str(o, "fiat"));
        }
    }

    /// <summary>Op is one op of a change as sent: an amount above 0 grants, below 0 consumes.</summary>
    public sealed class Op
    {
        public Op(string currency, long amount)
        {
            Currency = currency;
            Amount = amount;
        }

        public string Currency { get; private set; }
        public long Amount { get; private set; }
        /// <summary>Kind is, for grants, "free" (the default) or "paid", with its Purchase.</summary>
        public string Kind { get; set; }
        public DateTimeOffset? ExpiresAt { get; set; }
        public int? Priority { get; set; }
        public Purchase Purchase { get; set; }

        internal IDictionary<string, object> ToWire()
        {
            var o = new Dictionary<string, object> { { "currency", Currency }, { "amount", Amount } };
            Wire.Put(o, "kind", Kind);
            Wire.Put(o, "expires_at", ExpiresAt);
            if (Priority.HasValue) o["priority"] = Priority.Value;
            if (Purchase != null) o["purchase"] = Purchase.ToWire();
            return o;
        }
    }

    /// <summary>Change is a one-phase change, or the begin of a hold with Hold true.</summary>
    public class Change
    {
        public Change(string idempotencyKey, params Op[] ops)
        {
            IdempotencyKey = idempotencyKey;
            Ops = ops.ToList();
        }

        public string IdempotencyKey { get; private set; }
        public IList<Op> Ops { get; private set; }
        public string Reason { get; set; }
        public IDictionary<string, object> Meta { get; set; }
        public bool Hold { get; set; }
        /// <summary>HoldTtlSeconds is the hold's life; 0 means the configured default.</summary>
        public long HoldTtlSeconds { get; set; }

        internal virtual IDictionary<string, object> ToWire()
        {
            var o = new Dictionary<string, object> { { "idempotency_key", IdempotencyKey }, { "ops", Ops.Select(op => op.ToWire()).ToList() } };
            Wire.Put(o, "reason", Reason);
            Wire.Put(o, "meta", Meta);
            Wire.Put(o, "hold", Hold);
            Wire.Put(o, "hold_ttl_seconds", HoldTtlSeconds);
            return o;
        }
    }

    /// <summary>BatchChange is one change of a batch, with the player it is for.</summary>
    public sealed class BatchChange : Change
    {
        public BatchChange(long playerId, string idempotencyKey, params Op[] ops) : base(idempotencyKey, ops)
        {
            PlayerId = playerId;
        }

        public long PlayerId { get; private set; }

        internal override IDictionary<string, object> ToWire()
        {
            var o = base.ToWire();
            o["player_id"] = PlayerId;
            return o;
        }
    }

    /// <summary>Exchange consumes Amount of From and grants To at the namespace's rate.</summary>
    public sealed class Exchange
    {
        public Exchange(string idempotencyKey, string from, long amount, string to)
        {
            IdempotencyKey = idempotencyKey;
            From = from;
            Amount = amount;
            To = to;
        }

        public string IdempotencyKey { get; private set; }
        public string From { get; private set; }
        public long Amount { get; private set; }
        public string To { get; private set; }
        public string Reason { get; set; }
        public IDictionary<string, object> Meta { get; set; }

        internal IDictionary<string, object> ToWire()
        {
            var o = new Dictionary<string, object> { { "idempotency_key", IdempotencyKey }, { "from", From }, { "amount", Amount }, { "to", To } };
            Wire.Put(o, "reason", Reason);
            Wire.Put(o, "meta", Meta);
            return o;
        }
    }

    /// <summary>Refund takes back a store order credited to the player; Kind is "refund" or "chargeback".</summary>
    public sealed class Refund
    {
        public Refund(string idempotencyKey, string store, string orderId, string kind)
        {
            IdempotencyKey = idempotencyKey;
            Store = store;
            OrderId = orderId;
            Kind = kind;
        }

        public string IdempotencyKey { get; private set; }
        public string Store { get; private set; }
        public string OrderId { get; private set; }
        public string Kind { get; private set; }
        public string Reason { get; set; }

        internal IDictionary<string, object> ToWire()
        {
            var o = new Dictionary<string, object> { { "idempotency_key", IdempotencyKey }, { "store", Store }, { "order_id", OrderId }, { "kind", Kind } };
            Wire.Put(o, "reason", Reason);
            return o;
        }
    }

    // Answers.

    /// <summary>Money is an amount in minor units of an ISO 4217 fiat currency.</summary>
    public sealed class Money
    {
        public long Amount { get; private set; }
        public string Fiat { get; private set; }

        internal static Money Read(IDictionary<string, object> o)
        {
            return new Money { Amount = Wire.Long(o, "amount"), Fiat = Wire.Str(o, "fiat") };
        }
    }

    /// <summary>TrxOp is one movement on one lot inside a trx; Kind is grant, consume or expire.</summary>
    public sealed class TrxOp
    {
        public string Currency { get; private set; }
        public long Amount { get; private set; }
        public string Kind { get; private set; }
        public string Cause { get; private set; }
        public bool Paid { get; private set; }
        public long LotId { get; private set; }
        public long BalanceAfter { get; private set; }
        public bool Pending { get; private set; }
        public Purchase Purchase { get; private set; }
        public Money Value { get; private set; }

        internal static TrxOp Read(IDictionary<string, object> o)
        {
            return new TrxOp
            {
                Currency = Wire.Str(o, "currency"),
                Amount = Wire.Long(o, "amount"),
                Kind = Wire.Str(o, "kind"),
                Cause = Wire.Str(o, "cause"),
                Paid = Wire.Bool(o, "paid"),
                LotId = Wire.Long(o, "lot_id"),
                BalanceAfter = Wire.Long(o, "balance_after"),
                Pending = Wire.Bool(o, "pending"),
                Purchase = Wire.Obj(o, "purchase", Purchase.Read),
                Value = Wire.Obj(o, "value", Money.Read),
            };
        }
    }

    /// <summary>Lot is one balance row of a player (balances read with lots).</summary>
    public sealed class Lot
    {
        public long Id { get; private set; }
        public string Currency { get; private set; }
        public long Amount { get; private set; }
        public bool Paid { get; private set; }
        public int Priority { get; private set; }
        public DateTimeOffset? ExpiresAt { get; private set; }
        public DateTimeOffset? CreatedAt { get; private set; }

        internal static Lot Read(IDictionary<string, object> o)
        {
            return new Lot
            {
                Id = Wire.Long(o, "id"),
                Currency = Wire.Str(o, "currency"),
                Amount = Wire.Long(o, "amount"),
                Paid = Wire.Bool(o, "paid"),
                Priority = Wire.Int(o, "priority"),
                ExpiresAt = Wire.Time(o, "expires_at"),
                CreatedAt = Wire.Time(o, "created_at"),
            };
        }
    }

    /// <summary>Balance is a player's balance in one currency.</summary>
    public sealed class Balance
    {
        public string Currency { get; private set; }
        public long Total { get; private set; }
        public long Paid { get; private set; }
        public long Free { get; private set; }
        public IReadOnlyList<Lot> Lots { get; private set; }

        internal static Balance Read(IDictionary<string, object> o)
        {
            return new Balance
            {
                Currency = Wire.Str(o, "currency"),
                Total = Wire.Long(o, "total"),
                Paid = Wire.Long(o, "paid"),
                Free = Wire.Long(o, "free"),
                Lots = Wire.List(o, "lots", Lot.Read),
            };
        }
    }

    /// <summary>Balances is a player's balances in a namespace, now or at a past time (At).</summary>
    public sealed class Balances
    {
        public int Namespace { get; private set; }
        public long PlayerId { get; private set; }
        public long Version { get; private set; }
        public IReadOnlyList<Balance> Items { get; private set; }
        public DateTimeOffset? At { get; private set; }

        /// <summary>Total is the player's total in currency, 0 when it holds none.</summary>
        public long Total(string currency)
        {
            var b = Items.FirstOrDefault(x => x.Currency == currency);
            return b == null ? 0 : b.Total;
        }

        internal static Balances Read(IDictionary<string, object> o)
        {
            return new Balances
            {
                Namespace = Wire.Int(o, "namespace"),
                PlayerId = Wire.Long(o, "player_id"),
                Version = Wire.Long(o, "version"),
                Items = Wire.List(o, "balances", Balance.Read),
                At = Wire.Time(o, "at"),
            };
        }
    }

    /// <summary>RefundAmount is an amount of a currency a refund counts, and what it cost.</summary>
    public sealed class RefundAmount
    {
        public string Currency { get; private set; }
        public long Amount { get; private set; }
        public long Value { get; private set; }

        internal static RefundAmount Read(IDictionary<string, object> o)
        {
            return new RefundAmount { Currency = Wire.Str(o, "currency"), Amount = Wire.Long(o, "amount"), Value = Wire.Long(o, "value") };
        }
    }

    /// <summary>TrxRefund is what a refund trx took back, and what it could not.</summary>
    public sealed class TrxRefund
    {
        public string Store { get; private set; }
        public string OrderId { get; private set; }
        public string Kind { get; private set; }
        public IReadOnlyList<RefundAmount> Exchanged { get; private set; }
        public IReadOnlyList<RefundAmount> Shortfall { get; private set; }

        internal static TrxRefund Read(IDictionary<string, object> o)
        {
            return new TrxRefund
            {
                Store = Wire.Str(o, "store"),
                OrderId = Wire.Str(o, "order_id"),
                Kind = Wire.Str(o, "kind"),
                Exchanged = Wire.List(o, "exchanged", RefundAmount.Read),
                Shortfall = Wire.List(o, "shortfall", RefundAmount.Read),
            };
        }
    }

    /// <summary>
    /// Trx is one accepted request. Kind is change, hold, exchange, expire or
    /// refund; Status is committed, pending (only holds), rolled_back or
    /// expired. Replay is not in the body: it is true when the answer is the
    /// original result of an earlier request with the same key.
    /// </summary>
    public sealed class Trx
    {
        public long Id { get; private set; }
        public string IdempotencyKey { get; private set; }
        /// <summary>Emitter is the emitter of the client that wrote it, whose key it is; 0 for coffer's expiries.</summary>
        public int Emitter { get; private set; }
        public string Kind { get; private set; }
        public string Status { get; private set; }
        public string Reason { get; private set; }
        public IDictionary<string, object> Meta { get; private set; }
        public IReadOnlyList<TrxOp> Ops { get; private set; }
        public DateTimeOffset CreatedAt { get; private set; }
        public DateTimeOffset? HoldExpiresAt { get; private set; }
        public TrxRefund Refund { get; private set; }
        /// <summary>FinishedBy is the emitter of the client that committed or rolled back a hold; 0 while pending, and when coffer expired it.</summary>
        public int FinishedBy { get; private set; }
        public IReadOnlyList<Balance> Balances { get; private set; }
        public long Version { get; private set; }
        public bool Replay { get; private set; }

        internal static Trx Read(IDictionary<string, object> o, bool replay)
        {
            return new Trx
            {
                Id = Wire.Long(o, "id"),
                IdempotencyKey = Wire.Str(o, "idempotency_key"),
                Emitter = Wire.Int(o, "emitter"),
                Kind = Wire.Str(o, "kind"),
                Status = Wire.Str(o, "status"),
                Reason = Wire.Str(o, "reason"),
                Meta = Wire.Obj(o, "meta"),
                Ops = Wire.List(o, "ops", TrxOp.Read),
                CreatedAt = Wire.Time(o, "created_at").GetValueOrDefault(),
                HoldExpiresAt = Wire.Time(o, "hold_expires_at"),
                Refund = Wire.Obj(o, "refund", TrxRefund.Read),
                FinishedBy = Wire.Int(o, "finished_by"),
                Balances = Wire.List(o, "balances", Balance.Read),
                Version = Wire.Long(o, "version"),
                Replay = replay,
            };
        }
    }

    /// <summary>FinlogPage is a page of a player's finlog; NextCursor is "" on the last page.</summary>
    public sealed class FinlogPage
    {
        public IReadOnlyList<Trx> Items { get; private set; }
        public string NextCursor { get; private set; }

        internal static FinlogPage Read(IDictionary<string, object> o)
        {
            return new FinlogPage { Items = Wire.List(o, "items", t => Trx.Read(t, false)), NextCursor = Wire.Str(o, "next_cursor") };
        }
    }

    /// <summary>OrderClaim is who presented a store order first: the player it was credited to, and the request's client (Emitter) and key.</summary>
    public sealed class OrderClaim
    {
        public int Namespace { get; private set; }
        public string Store { get; private set; }
        public string OrderId { get; private set; }
        public long PlayerId { get; private set; }
        public int Emitter { get; private set; }
        public string IdempotencyKey { get; private set; }
        public DateTimeOffset CreatedAt { get; private set; }

        internal static OrderClaim Read(IDictionary<string, object> o)
        {
            return new OrderClaim
            {
                Namespace = Wire.Int(o, "namespace"),
                Store = Wire.Str(o, "store"),
                OrderId = Wire.Str(o, "order_id"),
                PlayerId = Wire.Long(o, "player_id"),
                Emitter = Wire.Int(o, "emitter"),
                IdempotencyKey = Wire.Str(o, "idempotency_key"),
                CreatedAt = Wire.Time(o, "created_at").GetValueOrDefault(),
            };
        }
    }

    /// <summary>RevenueLine is the revenue report's line of one currency and fiat (docs/ledger.md); each amount has its value in fiat.</summary>
    public sealed class RevenueLine
    {
        public string Currency { get; private set; }
        public string Fiat { get; private set; }
        public long Opening { get; private set; }
        public long OpeningValue { get; private set; }
        public long Deposited { get; private set; }
        public long DepositedValue { get; private set; }
        public long Recognised { get; private set; }
        public long RecognisedValue { get; private set; }
        public long ConvertedIn { get; private set; }
        public long ConvertedInValue { get; private set; }
        public long ConvertedOut { get; private set; }
        public long ConvertedOutValue { get; private set; }
        public long Expired { get; private set; }
        public long ExpiredValue { get; private set; }
        public long Refunded { get; private set; }
        public long RefundedValue { get; private set; }
        public long RefundShortfall { get; private set; }
        public long RefundShortfallValue { get; private set; }
        public long Deferred { get; private set; }
        public long DeferredValue { get; private set; }

        internal static RevenueLine Read(IDictionary<string, object> o)
        {
            return new RevenueLine
            {
                Currency = Wire.Str(o, "currency"),
                Fiat = Wire.Str(o, "fiat"),
                Opening = Wire.Long(o, "opening"),
                OpeningValue = Wire.Long(o, "opening_value"),
                Deposited = Wire.Long(o, "deposited"),
                DepositedValue = Wire.Long(o, "deposited_value"),
                Recognised = Wire.Long(o, "recognised"),
                RecognisedValue = Wire.Long(o, "recognised_value"),
                ConvertedIn = Wire.Long(o, "converted_in"),
                ConvertedInValue = Wire.Long(o, "converted_in_value"),
                ConvertedOut = Wire.Long(o, "converted_out"),
                ConvertedOutValue = Wire.Long(o, "converted_out_value"),
                Expired = Wire.Long(o, "expired"),
                ExpiredValue = Wire.Long(o, "expired_value"),
                Refunded = Wire.Long(o, "refunded"),
                RefundedValue = Wire.Long(o, "refunded_value"),
                RefundShortfall = Wire.Long(o, "refund_shortfall"),
                RefundShortfallValue = Wire.Long(o, "refund_shortfall_value"),
                Deferred = Wire.Long(o, "deferred"),
                DeferredValue = Wire.Long(o, "deferred_value"),
            };
        }
    }
}
