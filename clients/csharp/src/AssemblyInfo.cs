using System.Runtime.CompilerServices;

// The tests (test/, built as story.exe) read the OpenAPI document with the
// client's own JSON reader.
[assembly: InternalsVisibleTo("story")]
