/* The skip check and hash algorithm vocabularies, shared by the engine's
 * command line, the metadata record and the plugstack configuration. */
#ifndef STAGEHAND_MODES_H
#define STAGEHAND_MODES_H

/* Skip checks (--check, plugstack check=). */
enum sh_check {
    SH_CHECK_META = 0,  /* trust the record written after a verified publish (default) */
    SH_CHECK_CONTENT,   /* record, plus re-hash DST and compare with it */
    SH_CHECK_SIZE,      /* DST size == SRC size: unsafe, for compatibility */
    SH_CHECK_NEVER,     /* always copy */
};

/* Content digests (--hash, plugstack hash=). The values are stored in
 * metadata records: never renumber. */
enum sh_hash_algo { SH_HASH_XXH3 = 1, SH_HASH_SHA256 = 2 };

/* "meta", "content", "size", "never" <-> enum. Parse returns 0 or -1 with
 * errno = EINVAL; name returns NULL for an unknown value. */
int sh_check_parse(const char *text, enum sh_check *check);
const char *sh_check_name(enum sh_check check);

/* "xxh3", "sha256" <-> enum. Same conventions. */
int sh_hash_parse(const char *name, enum sh_hash_algo *algo);
const char *sh_hash_name(enum sh_hash_algo algo);

#endif
