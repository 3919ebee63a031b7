// CofferClient: coffer's HTTP/JSON API, one async method per call. A
// refusal that did nothing and may pass later (CofferException.Retryable)
// is sent again, the very same request and so the same idempotency key,
// after the answer's Retry-After: at most Retries times, each wait at most
// RetryAfterMax.

using System;
using System.Collections.Generic;
using System.Globalization;
using System.Linq;
using System.Net.Http;
using System.Net.Http.Headers;
using System.Text;
using System.Threading;
using System.Threading.Tasks;

namespace Coffer
{
    /// <summary>CofferClientOptions configure a CofferClient; only BaseUrl and ApiKey are required.</summary>
    public sealed class CofferClientOptions
    {
        public CofferClientOptions(string baseUrl, string apiKey)
        {
            BaseUrl = baseUrl;
            ApiKey = apiKey;
            Timeout = TimeSpan.FromSeconds(10);
            Retries = 3;
            RetryAfterMax = TimeSpan.FromSeconds(30);
        }

        /// <summary>BaseUrl is the service's address, e.g. "http://127.0.0.1:8080".</summary>
        public string BaseUrl { get; private set; }
        public string ApiKey { get; private set; }
        /// <summary>Timeout bounds each attempt; default 10 s.</summary>
        public TimeSpan Timeout { get; set; }
        /// <summary>Retries is how many times a retryable refusal is sent again; default 3.</summary>
        public int Retries { get; set; }
        /// <summary>RetryAfterMax is the longest wait before a retry, whatever Retry-After says; default 30 s.</summary>
        public TimeSpan RetryAfterMax { get; set; }
        /// <summary>Sleep waits before a retry; default Task.Delay.</summary>
        public Func<TimeSpan, CancellationToken, Task> Sleep { get; set; }
        /// <summary>HttpClient is your own (for proxies or TLS settings), which the client does not dispose; default a new one.</summary>
        public HttpClient HttpClient { get; set; }
    }

    /// <summary>BatchResult is the result of one change of a batch: its Trx, or the Error the change sent alone would have had.</summary>
    public sealed class BatchResult
    {
        public int Status { get; internal set; }
        public Trx Trx { get; internal set; }
        public CofferException Error { get; internal set; }
    }

    /// <summary>BalancesQuery selects the balances read: one currency, at a past time, with lots.</summary>
    public sealed class BalancesQuery
    {
        public string Currency { get; set; }
        public DateTimeOffset? At { get; set; }
        public bool Lots { get; set; }
    }

    /// <summary>
    /// FinlogQuery selects a finlog page: the period [From, To), filters, the
    /// page. A filtered page may come short, with a cursor. Kind and Status
    /// take the values of Trx's; Order is "asc" or "desc".
    /// </summary>
    public sealed class FinlogQuery
    {
        public DateTimeOffset? From { get; set; }
        public DateTimeOffset? To { get; set; }
        public string Currency { get; set; }
        public string Reason { get; set; }
        public string Kind { get; set; }
        public string Status { get; set; }
        /// <summary>IdempotencyKey selects only the trx under this key, whichever client gave it.</summary>
        public string IdempotencyKey { get; set; }
        public int Limit { get; set; }
        public string Cursor { get; set; }
        public string Order { get; set; }
    }

    /// <summary>
    /// CofferClient calls one coffer service with one API key; it is safe for
    /// concurrent use. Errors the service answers throw CofferException; a
    /// transport failure (refused connection, timeout) throws HttpClient's own
    /// exception, and a write may then be sent again with the same idempotency
    /// key. The cancellation token governs the whole call, its retries included.
    /// </summary>
    public sealed class CofferClient : IDisposable
    {
        private static readonly TimeSpan RetryAfterDefault = TimeSpan.FromSeconds(1);

        private readonly string baseUrl;
        private readonly AuthenticationHeaderValue authorization;
        private readonly TimeSpan timeout;
        private readonly int retries;
        private readonly TimeSpan retryAfterMax;
        private readonly Func<TimeSpan, CancellationToken, Task> sleep;
        private readonly HttpClient http;
        private readonly bool ownsHttp;

        public CofferClient(string baseUrl, string apiKey) : this(new CofferClientOptions(baseUrl, apiKey)) { }

        public CofferClient(CofferClientOptions options)
        {
            if (options.Retries < 0) throw new ArgumentOutOfRangeException("options", "Retries must be >= 0");
            baseUrl = options.BaseUrl.TrimEnd('/');
            authorization = new AuthenticationHeaderValue("Bearer", options.ApiKey);
            timeout = options.Timeout;
            retries = options.Retries;
            retryAfterMax = options.RetryAfterMax;
            sleep = options.Sleep ?? Task.Delay;
            ownsHttp = options.HttpClient == null;
            // Each attempt has its own timeout (options.Timeout); HttpClient's
            // own would bound the retries' waits too.
            http = options.HttpClient ?? new HttpClient { Timeout = System.Threading.Timeout.InfiniteTimeSpan };
        }

        /// <summary>GetBalancesAsync reads a player's balances: now, or at a past time (query.At).</summary>
        public Task<Balances> GetBalancesAsync(int ns, long player, BalancesQuery query = null, CancellationToken cancellationToken = default(CancellationToken))
        {
            var q = query ?? new BalancesQuery();
            var path = PlayerPath(ns, player) + "/balances" + Query(new Dictionary<string, object> { { "currency", q.Currency }, { "at", q.At }, { "lots", q.Lots } });
            return SendAsync(HttpMethod.Get, path, null, (status, o) => Balances.Read(o), cancellationToken);
        }

        /// <summary>ChangeAsync applies a change, or begins a hold (change.Hold).</summary>
        public Task<Trx> ChangeAsync(int ns, long player, Change change, CancellationToken cancellationToken = default(CancellationToken))
        {
            return SendAsync(HttpMethod.Post, PlayerPath(ns, player) + "/transactions", change.ToWire(), ReadTrx, cancellationToken);
        }

        /// <summary>
        /// BatchAsync applies up to 1000 changes of players of ns, each
        /// atomically on its own; one result per change, in request order. To
        /// retry results that failed retryably, send the whole batch again:
        /// what was applied replays.
        /// </summary>
        public Task<IReadOnlyList<BatchResult>> BatchAsync(int ns, IEnumerable<BatchChange> changes, CancellationToken cancellationToken = default(CancellationToken))
        {
            var body = new Dictionary<string, object> { { "changes", changes.Select(c => c.ToWire()).ToList() } };
            return SendAsync(HttpMethod.Post, "/v1/namespaces/" + ns + "/transactions:batch", body, (status, o) => Wire.List(o, "results", ReadBatchResult), cancellationToken);
        }

        /// <summary>CommitAsync commits the pending hold of idempotency key key.</summary>
        public Task<Trx> CommitAsync(int ns, long player, string key, CancellationToken cancellationToken = default(CancellationToken))
        {
            return SendAsync(HttpMethod.Post, TrxPath(ns, player, key) + "/commit", null, ReadTrx, cancellationToken);
        }

        /// <summary>RollbackAsync rolls the pending hold of idempotency key key back.</summary>
        public Task<Trx> RollbackAsync(int ns, long player, string key, CancellationToken cancellationToken = default(CancellationToken))
        {
            return SendAsync(HttpMethod.Post, TrxPath(ns, player, key) + "/rollback", null, ReadTrx, cancellationToken);
        }

        /// <summary>GetTrxAsync reads one trx of this client by its idempotency key, as it is now.</summary>
        public Task<Trx> GetTrxAsync(int ns, long player, string key, CancellationToken cancellationToken = default(CancellationToken))
        {
            return SendAsync(HttpMethod.Get, TrxPath(ns, player, key), null, ReadTrx, cancellationToken);
        }

        /// <summary>ExchangeAsync exchanges one currency for another at the namespace's rate.</summary>
        public Task<Trx> ExchangeAsync(int ns, long player, Exchange exchange, CancellationToken cancellationToken = default(CancellationToken))
        {
            return SendAsync(HttpMethod.Post, PlayerPath(ns, player) + "/exchanges", exchange.ToWire(), ReadTrx, cancellationToken);
        }

        /// <summary>RefundAsync takes back a store order credited to the player.</summary>
        public Task<Trx> RefundAsync(int ns, long player, Refund refund, CancellationToken cancellationToken = default(CancellationToken))
        {
            return SendAsync(HttpMethod.Post, PlayerPath(ns, player) + "/refunds", refund.ToWire(), ReadTrx, cancellationToken);
        }

        /// <summary>GetFinlogAsync reads a page of a player's finlog; pass its NextCursor as query.Cursor for the next.</summary>
        public Task<FinlogPage> GetFinlogAsync(int ns, long player, FinlogQuery query = null, CancellationToken cancellationToken = default(CancellationToken))
        {
            var q = query ?? new FinlogQuery();
            var path = PlayerPath(ns, player) + "/finlog" + Query(new Dictionary<string, object>
            {
                { "from", q.From }, { "to", q.To }, { "currency", q.Currency }, { "reason", q.Reason }, { "kind", q.Kind },
                { "status", q.Status }, { "idempotency_key", q.IdempotencyKey }, { "limit", q.Limit }, { "cursor", q.Cursor }, { "order", q.Order },
            });
            return SendAsync(HttpMethod.Get, path, null, (status, o) => FinlogPage.Read(o), cancellationToken);
        }

        /// <summary>GetOrderAsync reads who presented a store order first; not_found if it never was.</summary>
        public Task<OrderClaim> GetOrderAsync(int ns, string store, string orderId, CancellationToken cancellationToken = default(CancellationToken))
        {
            var path = "/v1/namespaces/" + ns + "/orders/" + Segment("a store", store) + "/" + Segment("an order id", orderId);
            return SendAsync(HttpMethod.Get, path, null, (status, o) => OrderClaim.Read(o), cancellationToken);
        }

        /// <summary>GetRevenueAsync reads the revenue report of ns over [from, to), optionally of one currency (admin).</summary>
        public Task<IReadOnlyList<RevenueLine>> GetRevenueAsync(int ns, DateTimeOffset from, DateTimeOffset to, string currency = null, CancellationToken cancellationToken = default(CancellationToken))
        {
            var path = "/v1/namespaces/" + ns + "/reports/revenue" + Query(new Dictionary<string, object> { { "from", from }, { "to", to }, { "currency", currency } });
            return SendAsync(HttpMethod.Get, path, null, (status, o) => Wire.List(o, "lines", RevenueLine.Read), cancellationToken);
        }

        public void Dispose()
        {
            if (ownsHttp) http.Dispose();
        }

        private static string PlayerPath(int ns, long player)
        {
            return "/v1/namespaces/" + ns + "/players/" + player;
        }

        // Segment is s as one escaped segment of a path. An empty s would make
        // an empty segment, which routes elsewhere. "." and ".." are names too,
        // but System.Uri (Mono's, .NET Framework's) removes such a segment even
        // escaped as %2E, as RFC 3986's normalisation allows, and the request
        // would go to another path: they are refused, and nothing is sent.
        private static string Segment(string what, string s)
        {
            if (string.IsNullOrEmpty(s)) throw new CofferException("invalid_argument", what + " is empty; nothing was sent");
            if (s == "." || s == "..") throw new CofferException("invalid_argument", what + " of \"" + s + "\" cannot be sent in a path by System.Uri; nothing was sent");
            return Uri.EscapeDataString(s);
        }

        // TrxPath is the path of the trx of key.
        private static string TrxPath(int ns, long player, string key)
        {
            return PlayerPath(ns, player) + "/transactions/" + Segment("an idempotency key", key);
        }

        // Query is the query string of the parameters that are set: not null, "", false or 0.
        private static string Query(IDictionary<string, object> parameters)
        {
            var set = new Dictionary<string, object>();
            foreach (var p in parameters) Wire.Put(set, p.Key, p.Value);
            if (set.Count == 0) return "";
            return "?" + string.Join("&", set.Select(p => p.Key + "=" + Uri.EscapeDataString(
                p.Value is bool ? "true" : Convert.ToString(p.Value, CultureInfo.InvariantCulture))));
        }

        private static Trx ReadTrx(int status, IDictionary<string, object> o)
        {
            return Trx.Read(o, status == 200);
        }

        private static BatchResult ReadBatchResult(IDictionary<string, object> r)
        {
            var status = Wire.Int(r, "status");
            var error = Wire.Obj(r, "error");
            if (error != null) return new BatchResult { Status = status, Error = Problem(status, error, null) };
            return new BatchResult { Status = status, Trx = Trx.Read(Wire.Obj(r, "trx"), Wire.Bool(r, "replay")) };
        }

        private static CofferException Problem(int status, IDictionary<string, object> o, TimeSpan? retryAfter)
        {
            return new CofferException(Wire.Str(o, "code"), Wire.Str(o, "detail"), status, Wire.Str(o, "request_id"), retryAfter);
        }

        private async Task<T> SendAsync<T>(HttpMethod method, string path, IDictionary<string, object> body, Func<int, IDictionary<string, object>, T> read, CancellationToken cancellationToken)
        {
            var json = body == null ? null : Json.Write(body);
            for (var attempt = 0; ; attempt++)
            {
                TimeSpan wait;
                try
                {
                    return await AttemptAsync(method, path, json, read, cancellationToken).ConfigureAwait(false);
                }
                catch (CofferException e) when (e.Retryable && attempt < retries)
                {
                    wait = e.RetryAfter ?? RetryAfterDefault;
                }
                await sleep(wait < retryAfterMax ? wait : retryAfterMax, cancellationToken).ConfigureAwait(false);
            }
        }

        // AttemptAsync sends the request once and reads its answer: the call's
        // result, or a CofferException.
        private async Task<T> AttemptAsync<T>(HttpMethod method, string path, string json, Func<int, IDictionary<string, object>, T> read, CancellationToken cancellationToken)
        {
            using (var request = new HttpRequestMessage(method, baseUrl + path))
            using (var cts = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken))
            {
                request.Headers.Authorization = authorization;
                if (json != null) request.Content = new StringContent(json, Encoding.UTF8, "application/json");
                cts.CancelAfter(timeout);
                using (var response = await http.SendAsync(request, cts.Token).ConfigureAwait(false))
                {
                    var text = await response.Content.ReadAsStringAsync().ConfigureAwait(false);
                    return Answer(method + " " + path, response, text, read);
                }
            }
        }

        private static T Answer<T>(string call, HttpResponseMessage response, string text, Func<int, IDictionary<string, object>, T> read)
        {
            var status = (int)response.StatusCode;
            var what = "coffer: " + call + ": HTTP " + status;
            IDictionary<string, object> body = null;
            try
            {
                body = text == "" ? null : Json.Parse(text) as IDictionary<string, object>;
            }
            catch (FormatException)
            {
            }
            if (status >= 300)
            {
                if (body == null || Wire.Str(body, "code") == "")
                    throw new UnexpectedAnswerException(what + ": " + (text.Length > 200 ? text.Substring(0, 200) : text), status);
                var retryAfter = response.Headers.RetryAfter;
                throw Problem(status, body, retryAfter == null ? null : retryAfter.Delta);
            }
            if (body == null) throw new UnexpectedAnswerException(what + ": not a JSON object", status);
            try
            {
                return read(status, body);
            }
            catch (Exception e) when (e is InvalidCastException || e is FormatException || e is OverflowException)
            {
                throw new UnexpectedAnswerException(what + ": " + e.Message, status, e);
            }
        }
    }
}
