// The models are written by hand (docs/adr/0017-clients.md): each holds a
// property for every field the server's OpenAPI document gives its schema,
// and no other, so that a field added to the API without the client fails
// here instead of being dropped silently. A property's field is its name
// in snake case.

using System;
using System.Collections.Generic;
using System.Linq;
using System.Net.Http;
using System.Text.RegularExpressions;
using System.Threading.Tasks;
using Coffer;

internal static partial class Story
{
    // Models are the document's schema of each model, and the fields of the
    // schema the model leaves out on purpose: the path's ids, which are arguments.
    private static readonly Dictionary<string, Tuple<Type, string[]>> Models = new Dictionary<string, Tuple<Type, string[]>>
    {
        { "Purchase", Tuple.Create(typeof(Purchase), new string[0]) },
        { "OpRequest", Tuple.Create(typeof(Op), new string[0]) },
        { "ChangeRequest", Tuple.Create(typeof(Change), new[] { "namespace", "player_id" }) },
        { "BatchChange", Tuple.Create(typeof(BatchChange), new string[0]) },
        { "ExchangeRequest", Tuple.Create(typeof(Exchange), new[] { "namespace", "player_id" }) },
        { "RefundRequest", Tuple.Create(typeof(Refund), new[] { "namespace", "player_id" }) },
        { "Money", Tuple.Create(typeof(Money), new string[0]) },
        { "Op", Tuple.Create(typeof(TrxOp), new string[0]) },
        { "Lot", Tuple.Create(typeof(Lot), new string[0]) },
        { "Balance", Tuple.Create(typeof(Balance), new string[0]) },
        { "Balances", Tuple.Create(typeof(Balances), new string[0]) },
        { "RefundAmount", Tuple.Create(typeof(RefundAmount), new string[0]) },
        { "Refund", Tuple.Create(typeof(TrxRefund), new string[0]) },
        { "Trx", Tuple.Create(typeof(Trx), new string[0]) },
        { "FinlogPage", Tuple.Create(typeof(FinlogPage), new string[0]) },
        { "OrderClaim", Tuple.Create(typeof(OrderClaim), new string[0]) },
        { "RevenueLine", Tuple.Create(typeof(RevenueLine), new string[0]) },
    };

    // Fields are the properties whose field is not their name in snake
    // case: a class cannot have a member of its own name; Replay is not in
    // the body (the answer's status tells it).
    private static readonly Dictionary<string, string> Fields = new Dictionary<string, string>
    {
        { "Balances.Items", "balances" },
        { "Trx.Replay", null },
    };

    private static async Task ModelsHoldTheDocumentsFields()
    {
        string text;
        using (var http = new HttpClient())
        {
            text = await http.GetStringAsync(url + "/openapi.json");
        }
        var schemas = (IDictionary<string, object>)((IDictionary<string, object>)((IDictionary<string, object>)Json.Parse(text))["components"])["schemas"];
        foreach (var m in Models)
        {
            var schema = (IDictionary<string, object>)schemas[m.Key];
            var documented = ((IDictionary<string, object>)schema["properties"]).Keys.Except(m.Value.Item2).OrderBy(n => n, StringComparer.Ordinal);
            var held = m.Value.Item1.GetProperties().Select(p => Field(m.Value.Item1.Name + "." + p.Name)).Where(n => n != null).OrderBy(n => n, StringComparer.Ordinal);
            EqualSeq(documented, held, m.Value.Item1.Name + " against the document's " + m.Key);
        }
    }

    private static string Field(string property)
    {
        string name;
        if (Fields.TryGetValue(property, out name)) return name;
        return Regex.Replace(property.Substring(property.IndexOf('.') + 1), "(?<!^)([A-Z])", "_$1").ToLowerInvariant();
    }
}
