// Wire reads the fields of a decoded JSON object (Json) into the models'
// properties, and writes times as coffer reads them. A field the server
// leaves out (a zero, an empty list) reads as its default: 0, false, "",
// an empty list, or null for an object or a time.

using System;
using System.Collections.Generic;
using System.Globalization;

namespace Coffer
{
    internal static class Wire
    {
        public static string Str(IDictionary<string, object> o, string name)
        {
            object v;
            return o.TryGetValue(name, out v) && v != null ? (string)v : "";
        }

        public static long Long(IDictionary<string, object> o, string name)
        {
            object v;
            return o.TryGetValue(name, out v) && v != null ? (long)v : 0;
        }

        public static int Int(IDictionary<string, object> o, string name)
        {
            return checked((int)Long(o, name));
        }

        public static bool Bool(IDictionary<string, object> o, string name)
        {
            object v;
            return o.TryGetValue(name, out v) && v != null && (bool)v;
        }

        public static DateTimeOffset? Time(IDictionary<string, object> o, string name)
        {
            var s = Str(o, name);
            if (s == "") return null;
            return DateTimeOffset.Parse(s, CultureInfo.InvariantCulture, DateTimeStyles.RoundtripKind);
        }

        public static IDictionary<string, object> Obj(IDictionary<string, object> o, string name)
        {
            object v;
            return o.TryGetValue(name, out v) ? (IDictionary<string, object>)v : null;
        }

        public static T Obj<T>(IDictionary<string, object> o, string name, Func<IDictionary<string, object>, T> read) where T : class
        {
            var v = Obj(o, name);
            return v == null ? null : read(v);
        }

        public static IReadOnlyList<T> List<T>(IDictionary<string, object> o, string name, Func<IDictionary<string, object>, T> read)
        {
            var list = new List<T>();
            object v;
            if (o.TryGetValue(name, out v) && v != null)
            {
                foreach (var item in (List<object>)v) list.Add(read((IDictionary<string, object>)item));
            }
            return list;
        }

        // Format is t as RFC 3339 in UTC, to the microsecond coffer keeps.
        public static string Format(DateTimeOffset t)
        {
            return t.UtcDateTime.ToString("yyyy-MM-dd'T'HH:mm:ss.ffffff'Z'", CultureInfo.InvariantCulture);
        }

        // Put sets name in o unless v is null, "", false or 0: what the
        // server takes as absent.
        public static void Put(IDictionary<string, object> o, string name, object v)
        {
            if (v == null || v as string == "" || false.Equals(v) || 0L.Equals(v) || 0.Equals(v)) return;
            if (v is DateTimeOffset) v = Format((DateTimeOffset)v);
            o[name] = v;
        }
    }
}
