// The client's tests, in one file so that node --test runs them one after
// the other (it runs files in parallel, and Node 18 cannot be told not
// to): the retry tests fill the server's request-byte budget, which
// would refuse the others' writes.

import "./story.js";
import "./retry.js";
