using System;

namespace Coffer
{
    /// <summary>
    /// CofferException is an error the service answered: Code is its stable
    /// code (docs/api.md, Errors), Status the HTTP status, Detail the
    /// service's explanation, RetryAfter what the answer asked to wait
    /// before a retry.
    /// </summary>
    public class CofferException : Exception
    {
        public CofferException(string code, string detail, int status = 0, string requestId = "", TimeSpan? retryAfter = null)
            : base(detail == "" ? code : code + ": " + detail)
        {
            Code = code;
            Detail = detail;
            Status = status;
            RequestId = requestId;
            RetryAfter = retryAfter;
        }

        public string Code { get; private set; }
        public string Detail { get; private set; }
        public int Status { get; private set; }
        public string RequestId { get; private set; }
        public TimeSpan? RetryAfter { get; private set; }

        /// <summary>
        /// Retryable tells whether the same request may pass if sent again
        /// later: the codes of refusals that did nothing, overloaded and
        /// shard_unavailable. The client retries them itself.
        /// </summary>
        public bool Retryable
        {
            get { return Code == "overloaded" || Code == "shard_unavailable"; }
        }
    }

    /// <summary>
    /// UnexpectedAnswerException is an answer outside the contract: an error
    /// without problem details (from a proxy, say), or a body that does not decode.
    /// </summary>
    public class UnexpectedAnswerException : Exception
    {
        public UnexpectedAnswerException(string message, int status, Exception inner = null) : base(message, inner)
        {
            Status = status;
        }

        public int Status { get; private set; }
    }
}
