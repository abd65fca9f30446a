/* Skip-check and hash vocabularies (stagehand/modes.h). Library code: every program. */
#include "config.h"
#include "stagehand/modes.h"

#include <errno.h>
#include <string.h>

#include "stagehand/bytes.h"
#include "stagehand/hash.h"

static const char *const check_names[] = { "meta", "content", "size", "never" };

int sh_check_parse(const char *text, enum sh_check *check)
{
    for (unsigned i = 0; i < sizeof(check_names) / sizeof(check_names[0]); i++) {
        if (text != NULL && strcmp(text, check_names[i]) == 0) {
            *check = (enum sh_check)i;
            return 0;
        }
    }
    errno = EINVAL;
    return -1;
}

const char *sh_check_name(enum sh_check check)
{
    unsigned i = (unsigned)check;

    return i < sizeof(check_names) / sizeof(check_names[0]) ? check_names[i] : NULL;
}

const char *sh_hash_name(enum sh_hash_algo algo)
{
    switch (algo) {
    case SH_HASH_XXH3: return "xxh3";
    case SH_HASH_SHA256: return "sha256";
    }
    return NULL;
}

int sh_hash_parse(const char *name, enum sh_hash_algo *algo)
{
    if (name != NULL && strcmp(name, "xxh3") == 0) {
        *algo = SH_HASH_XXH3;
        return 0;
    }
    if (name != NULL && strcmp(name, "sha256") == 0) {
        *algo = SH_HASH_SHA256;
        return 0;
    }
    errno = EINVAL;
    return -1;
}

const char *sh_phase_name(enum sh_phase p)
{
    static const char *const names[SH_PH_COUNT] = {
        "start-up", "metadata", "pre-check", "transfer", "verify", "publish",
    };

    return (unsigned)p < SH_PH_COUNT ? names[p] : "?";
}

/* Digest lengths and hex forms (stagehand/hash.h): libc only, so the plugin
 * can read metadata records without linking libcrypto. */
size_t sh_hash_len(enum sh_hash_algo algo)
{
    switch (algo) {
    case SH_HASH_XXH3: return 16;
    case SH_HASH_SHA256: return 32;
    }
    return 0;
}

char *sh_hash_hex(const uint8_t *digest, size_t len, char *hex)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < len; i++) {
        hex[2 * i] = digits[digest[i] >> 4];
        hex[2 * i + 1] = digits[digest[i] & 0x0f];
    }
    hex[2 * len] = '\0';
    return hex;
}

int sh_hash_unhex(const char *hex, uint8_t *digest, size_t len)
{
    if (strlen(hex) != 2 * len) {
        errno = EINVAL;
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        int hi = sh_hex_digit(hex[2 * i]);
        int lo = sh_hex_digit(hex[2 * i + 1]);

        if (hi < 0 || lo < 0) {
            errno = EINVAL;
            return -1;
        }
        digest[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}
