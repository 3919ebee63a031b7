// Json reads and writes the JSON of coffer's API: objects as
// Dictionary<string, object>, arrays as List<object>, integers as long
// (a balance may reach 10^18, past what a double holds exactly), other
// numbers as double, strings, bools and null. Written by hand so that the
// client needs nothing beyond the base class library of .NET Framework 4.x,
// Mono and modern .NET alike (docs/adr/0017-clients.md).

using System;
using System.Collections.Generic;
using System.Globalization;
using System.Text;

namespace Coffer
{
    internal static class Json
    {
        // MaxDepth bounds the nesting Parse follows (coffer's meta has at most 32 levels).
        private const int MaxDepth = 64;

        public static object Parse(string text)
        {
            var p = new Parser(text);
            p.SkipSpace();
            var v = p.Value(0);
            p.SkipSpace();
            if (p.Pos != text.Length) throw p.Fail("text after the value");
            return v;
        }

        public static string Write(object value)
        {
            var sb = new StringBuilder();
            Write(sb, value);
            return sb.ToString();
        }

        private static void Write(StringBuilder sb, object v)
        {
            if (v == null) { sb.Append("null"); return; }
            if (v is string) { WriteString(sb, (string)v); return; }
            if (v is bool) { sb.Append((bool)v ? "true" : "false"); return; }
            if (v is long || v is int || v is short || v is byte || v is uint || v is ulong)
            {
                sb.Append(Convert.ToString(v, CultureInfo.InvariantCulture));
                return;
            }
            if (v is double || v is float || v is decimal)
            {
                var d = Convert.ToDouble(v, CultureInfo.InvariantCulture);
                if (double.IsNaN(d) || double.IsInfinity(d)) throw new ArgumentException("JSON has no NaN or infinity");
                sb.Append(d.ToString("R", CultureInfo.InvariantCulture));
                return;
            }
            var obj = v as IDictionary<string, object>;
            if (obj != null)
            {
                sb.Append('{');
                var first = true;
                foreach (var kv in obj)
                {
                    if (!first) sb.Append(',');
                    first = false;
                    WriteString(sb, kv.Key);
                    sb.Append(':');
                    Write(sb, kv.Value);
                }
                sb.Append('}');
                return;
            }
            var list = v as System.Collections.IEnumerable;
            if (list != null)
            {
                sb.Append('[');
                var first = true;
                foreach (var item in list)
                {
                    if (!first) sb.Append(',');
                    first = false;
                    Write(sb, item);
                }
                sb.Append(']');
                return;
            }
            throw new ArgumentException("no JSON for a " + v.GetType().Name);
        }

        private static void WriteString(StringBuilder sb, string s)
        {
            sb.Append('"');
            foreach (var c in s)
            {
                switch (c)
                {
                    case '"': sb.Append("\\\""); break;
                    case '\\': sb.Append("\\\\"); break;
                    case '\n': sb.Append("\\n"); break;
                    case '\r': sb.Append("\\r"); break;
                    case '\t': sb.Append("\\t"); break;
                    default:
                        if (c < 0x20) sb.Append("\\u").Append(((int)c).ToString("x4", CultureInfo.InvariantCulture));
                        else sb.Append(c);
                        break;
                }
            }
            sb.Append('"');
        }

        private sealed class Parser
        {
            private readonly string s;
            public int Pos;

            public Parser(string text) { s = text; }

            public FormatException Fail(string what)
            {
                return new FormatException("JSON: " + what + " at offset " + Pos);
            }

            public void SkipSpace()
            {
                while (Pos < s.Length && (s[Pos] == ' ' || s[Pos] == '\t' || s[Pos] == '\n' || s[Pos] == '\r')) Pos++;
            }

            public object Value(int depth)
            {
                if (depth > MaxDepth) throw Fail("nested too deep");
                if (Pos >= s.Length) throw Fail("unexpected end");
                switch (s[Pos])
                {
                    case '{': return Object(depth);
                    case '[': return Array(depth);
                    case '"': return String();
                    case 't': return Word("true", true);
                    case 'f': return Word("false", false);
                    case 'n': return Word("null", null);
                    default: return Number();
                }
            }

            private object Word(string word, object v)
            {
                if (string.CompareOrdinal(s, Pos, word, 0, word.Length) != 0) throw Fail("unexpected character");
                Pos += word.Length;
                return v;
            }

            private Dictionary<string, object> Object(int depth)
            {
                var d = new Dictionary<string, object>();
                Pos++;
                SkipSpace();
                if (Pos < s.Length && s[Pos] == '}') { Pos++; return d; }
                while (true)
                {
                    SkipSpace();
                    if (Pos >= s.Length || s[Pos] != '"') throw Fail("expected a name");
                    var name = String();
                    SkipSpace();
                    Expect(':');
                    SkipSpace();
                    d[name] = Value(depth + 1);
                    SkipSpace();
                    if (Pos < s.Length && s[Pos] == ',') { Pos++; continue; }
                    Expect('}');
                    return d;
                }
            }

            private List<object> Array(int depth)
            {
                var l = new List<object>();
                Pos++;
                SkipSpace();
                if (Pos < s.Length && s[Pos] == ']') { Pos++; return l; }
                while (true)
                {
                    SkipSpace();
                    l.Add(Value(depth + 1));
                    SkipSpace();
                    if (Pos < s.Length && s[Pos] == ',') { Pos++; continue; }
                    Expect(']');
                    return l;
                }
            }

            private void Expect(char c)
            {
                if (Pos >= s.Length || s[Pos] != c) throw Fail("expected '" + c + "'");
                Pos++;
            }

            private string String()
            {
                var sb = new StringBuilder();
                Pos++;
                while (true)
                {
                    if (Pos >= s.Length) throw Fail("unterminated string");
                    var c = s[Pos++];
                    if (c == '"') return sb.ToString();
                    if (c != '\\') { sb.Append(c); continue; }
                    if (Pos >= s.Length) throw Fail("unterminated string");
                    var e = s[Pos++];
                    switch (e)
                    {
                        case '"': case '\\': case '/': sb.Append(e); break;
                        case 'b': sb.Append('\b'); break;
                        case 'f': sb.Append('\f'); break;
                        case 'n': sb.Append('\n'); break;
                        case 'r': sb.Append('\r'); break;
                        case 't': sb.Append('\t'); break;
                        case 'u':
                            int code;
                            if (Pos + 4 > s.Length || !int.TryParse(s.Substring(Pos, 4), NumberStyles.AllowHexSpecifier, CultureInfo.InvariantCulture, out code))
                                throw Fail("bad \\u escape");
                            sb.Append((char)code);
                            Pos += 4;
                            break;
                        default: throw Fail("bad escape");
                    }
                }
            }

            private object Number()
            {
                var start = Pos;
                var integer = true;
                while (Pos < s.Length && "+-0123456789.eE".IndexOf(s[Pos]) >= 0)
                {
                    if (s[Pos] == '.' || s[Pos] == 'e' || s[Pos] == 'E') integer = false;
                    Pos++;
                }
                var text = s.Substring(start, Pos - start);
                long l;
                if (integer && long.TryParse(text, NumberStyles.AllowLeadingSign, CultureInfo.InvariantCulture, out l)) return l;
                double d;
                if (text.Length > 0 && double.TryParse(text, NumberStyles.Float, CultureInfo.InvariantCulture, out d)) return d;
                Pos = start;
                throw Fail("unexpected character");
            }
        }
    }
}
