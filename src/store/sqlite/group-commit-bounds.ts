// Shared by the serving thread (group-commit.ts) and the writer thread (group-commit-thread.ts), which must agree.

/** The most statements one transaction takes: the rest wait for the next, so a commit never waits on a huge batch. */
export const TRANSACTION_STATEMENTS = 512;

/**
 * The most statements one message carries. The writer thread takes a message whole into a transaction, so a message
 * holds at most half of one: a turn of many writes still commits in bounded transactions.
 */
export const MESSAGE_STATEMENTS = TRANSACTION_STATEMENTS / 2;
