// A retryable refusal is sent again, after its Retry-After, with the same
// idempotency key. The refusal is the server's own: two request bodies
// that never finish arriving hold its budget of request bytes
// (limits.request_bytes_in_flight_max, 8 MiB in `coffer dev`; docs/api.md,
// Limits), so that every other write is refused with `overloaded` until
// they go.

using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Net.Http;
using System.Net.Sockets;
using System.Text;
using System.Threading.Tasks;
using Coffer;

internal static partial class Story
{
    private const int Budget = 8 << 20; // coffer dev's limits.request_bytes_in_flight_max
    private const int BatchMax = 4 << 20; // coffer dev's limits.batch_body_bytes_max: one body's most
    private static readonly TimeSpan WaitMax = TimeSpan.FromSeconds(30); // how long the server has to take, and to give back, the budget

    // HoldBudget sends two batch bodies of BatchMax bytes, all but the last
    // byte of each: together they hold the whole budget but 2 bytes.
    private static List<TcpClient> HoldBudget()
    {
        var u = new Uri(url);
        var hogs = new List<TcpClient>();
        for (var i = 0; i < Budget / BatchMax; i++)
        {
            var s = new TcpClient(u.Host, u.Port);
            hogs.Add(s);
            var head = "POST /v1/namespaces/" + NS + "/transactions:batch HTTP/1.1\r\nHost: " + u.Authority + "\r\n" +
                "Authorization: Bearer " + apiKey + "\r\nContent-Type: application/json\r\nContent-Length: " + BatchMax + "\r\n\r\n";
            var body = new byte[BatchMax - 1];
            for (var j = 0; j < body.Length; j++) body[j] = (byte)' ';
            try
            {
                s.GetStream().Write(Encoding.ASCII.GetBytes(head), 0, head.Length);
                s.GetStream().Write(body, 0, body.Length);
            }
            catch (System.IO.IOException)
            {
                // Refused while it was sent: Overload sees it answered or closed.
            }
        }
        return hogs;
    }

    private static void Release(List<TcpClient> hogs)
    {
        foreach (var s in hogs) s.Close();
        hogs.Clear();
    }

    // SmallWriteRefused tells whether the server refuses a small write with overloaded.
    private static async Task<bool> SmallWriteRefused()
    {
        using (var http = new HttpClient())
        {
            var request = new HttpRequestMessage(HttpMethod.Post, url + "/v1/namespaces/" + NS + "/players/1/transactions")
            {
                Content = new StringContent("{\"idempotency_key\": \"\"}"),
            };
            request.Headers.TryAddWithoutValidation("Authorization", "Bearer " + apiKey);
            using (var r = await http.SendAsync(request))
            {
                var body = await r.Content.ReadAsStringAsync();
                return (int)r.StatusCode == 503 && body.Contains("\"overloaded\"");
            }
        }
    }

    // Overload holds the budget until the server refuses a small write. A
    // probe holds its few bytes while it is served: if a hog's last bytes
    // arrive then, the server refuses that hog (it answers it, or closes
    // it), and the hogs are sent again.
    private static async Task<List<TcpClient>> Overload()
    {
        var clock = Stopwatch.StartNew();
        while (clock.Elapsed < WaitMax)
        {
            var hogs = HoldBudget();
            while (clock.Elapsed < WaitMax && hogs.TrueForAll(s => !s.Client.Poll(0, SelectMode.SelectRead)))
            {
                if (await SmallWriteRefused()) return hogs;
                await Task.Delay(50);
            }
            Release(hogs);
        }
        throw new Exception("the server was not overloaded in " + WaitMax);
    }

    // Served waits for the server to serve a small write again: it gives
    // back the hogs' bytes as they go.
    private static async Task Served()
    {
        var clock = Stopwatch.StartNew();
        while (clock.Elapsed < WaitMax)
        {
            if (!await SmallWriteRefused()) return;
            await Task.Delay(50);
        }
        throw new Exception("the server was still overloaded after " + WaitMax);
    }

    private static async Task RetryOverloaded()
    {
        var p = Player();
        var hogs = await Overload();
        var waits = new List<TimeSpan>();
        try
        {
            var options = new CofferClientOptions(url, apiKey)
            {
                // The first refusal: let the hogs go, then the retry can pass.
                Sleep = async (d, ct) =>
                {
                    waits.Add(d);
                    if (hogs.Count > 0)
                    {
                        Release(hogs);
                        await Served();
                    }
                },
            };
            using (var c = new CofferClient(options))
            {
                var grant = new Change(Key("retried"), new Op("gold", 40));
                var trx = await c.ChangeAsync(NS, p, grant);
                EqualSeq(new[] { TimeSpan.FromSeconds(1) }, waits, "one refusal, waited for its Retry-After");
                Equal("committed False", trx.Status + " " + trx.Replay, "the retried write");
                Equal(trx.Id, (await c.ChangeAsync(NS, p, grant)).Id, "the same key again");
                Equal(40L, (await c.GetBalancesAsync(NS, p)).Total("gold"), "written once");
            }
        }
        finally
        {
            Release(hogs);
        }
    }

    private static async Task RetriesBounded()
    {
        var hogs = await Overload();
        var waits = new List<TimeSpan>();
        try
        {
            var options = new CofferClientOptions(url, apiKey) { Retries = 2, Sleep = (d, ct) => { waits.Add(d); return Task.FromResult(0); } };
            using (var c = new CofferClient(options))
            {
                var err = await Refused(() => c.ChangeAsync(NS, Player(), new Change(Key("refused"), new Op("gold", 1))));
                Equal("overloaded 503 00:00:01 True", err.Code + " " + err.Status + " " + err.RetryAfter + " " + err.Retryable, "the last refusal");
                EqualSeq(new[] { TimeSpan.FromSeconds(1), TimeSpan.FromSeconds(1) }, waits, "waits");
            }
        }
        finally
        {
            Release(hogs);
        }
        await Served();
    }
}
