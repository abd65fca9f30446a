/* Unit tests: --stage-image grammar, spec sets and their wire form. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stagehand/ref.h"
#include "stagehand/spec.h"

#include "check_main.h"

#define DEFDIR "/nvme/stage/alice"

struct value_case {
    const char *value;
    int err;                 /* 0 = accepted, else expected errno */
    const char *msg;         /* substring of the error message */
    size_t n;                /* images expected when accepted */
    const char *src[3];
    const char *dst[3];
};

/* The corpus: option values as users type them (C escapes are C's). */
static const struct value_case corpus[] = {
    /* ---- accepted ---- */
    { "/shared/img.sqsh:/nvme/img.sqsh", 0, NULL, 1,
      { "/shared/img.sqsh" }, { "/nvme/img.sqsh" } },
    /* no DST: default directory + basename */
    { "/shared/img.sqsh", 0, NULL, 1,
      { "/shared/img.sqsh" }, { DEFDIR "/img.sqsh" } },
    /* lexical normalisation */
    { "//shared//a/./img.sqsh:/nvme//x/./y.sqsh/", 0, NULL, 1,
      { "/shared/a/img.sqsh" }, { "/nvme/x/y.sqsh/img.sqsh" } },
    { "/shared/a/./b.sqsh:/nvme///b.sqsh", 0, NULL, 1,
      { "/shared/a/b.sqsh" }, { "/nvme/b.sqsh" } },
    /* several images in one value */
    { "/a.sqsh,/b.sqsh:/nvme/b", 0, NULL, 2,
      { "/a.sqsh", "/b.sqsh" }, { DEFDIR "/a.sqsh", "/nvme/b" } },
    { "/a.sqsh:/nvme/a,/b.sqsh:/nvme/b,/c.sqsh", 0, NULL, 3,
      { "/a.sqsh", "/b.sqsh", "/c.sqsh" },
      { "/nvme/a", "/nvme/b", DEFDIR "/c.sqsh" } },
    /* escapes: ':' ',' and '\' inside paths */
    { "/data/run\\:3\\,final.sqsh:/nvme/x", 0, NULL, 1,
      { "/data/run:3,final.sqsh" }, { "/nvme/x" } },
    { "/data/back\\\\slash.sqsh:/nvme/y\\:z", 0, NULL, 1,
      { "/data/back\\slash.sqsh" }, { "/nvme/y:z" } },
    { "/data/a\\:b.sqsh", 0, NULL, 1,
      { "/data/a:b.sqsh" }, { DEFDIR "/a:b.sqsh" } },
    /* DST ending in '/' is a directory */
    { "/x/a.sqsh:/nvme/dir/", 0, NULL, 1,
      { "/x/a.sqsh" }, { "/nvme/dir/a.sqsh" } },
    { "/x/a.sqsh:/nvme/dir/.", 0, NULL, 1,
      { "/x/a.sqsh" }, { "/nvme/dir/a.sqsh" } },
    /* non-UTF-8 bytes are kept as bytes; UTF-8 too */
    { "/data/caf\xe9.sqsh", 0, NULL, 1,
      { "/data/caf\xe9.sqsh" }, { DEFDIR "/caf\xe9.sqsh" } },
    { "/data/\xc3\xbcml.sqsh:/nvme/\xc3\xbc", 0, NULL, 1,
      { "/data/\xc3\xbcml.sqsh" }, { "/nvme/\xc3\xbc" } },
    { "/data/with space.sqsh:/nvme/with space", 0, NULL, 1,
      { "/data/with space.sqsh" }, { "/nvme/with space" } },
    /* case F27: the same image twice in one value is one image */
    { "/a:/nvme/x,/a:/nvme/x", 0, NULL, 1, { "/a" }, { "/nvme/x" } },
    { "/a:/nvme/x,/a:/nvme//./x", 0, NULL, 1, { "/a" }, { "/nvme/x" } },
    /* one SRC to two DSTs is two images */
    { "/a:/nvme/x,/a:/nvme/y", 0, NULL, 2,
      { "/a", "/a" }, { "/nvme/x", "/nvme/y" } },
    /* dots that are not "." or ".." components are names */
    { "/d/..hidden/...:/nvme/.x", 0, NULL, 1,
      { "/d/..hidden/..." }, { "/nvme/.x" } },
    /* ---- registry images (issue 36; ref.h) ---- */
    { "docker://reg.example:5000/team/app:1.2", 0, NULL, 1,
      { "docker://reg.example:5000/team/app:1.2" }, { DEFDIR "/team+app+1.2.sqsh" } },
    /* no tag: latest; registry host in lower case */
    { "docker://Reg.Example/app", 0, NULL, 1,
      { "docker://reg.example/app:latest" }, { DEFDIR "/app+latest.sqsh" } },
    /* pyxis's REGISTRY#REPO form is the same image */
    { "docker://reg.example#team/app:1.2", 0, NULL, 1,
      { "docker://reg.example/team/app:1.2" }, { DEFDIR "/team+app+1.2.sqsh" } },
    { "docker://localhost/app:v1", 0, NULL, 1,
      { "docker://localhost/app:v1" }, { DEFDIR "/app+v1.sqsh" } },
    /* a tag, then DST after ":/" */
    { "docker://reg.example:5000/app:1.2:/nvme/app.sqsh", 0, NULL, 1,
      { "docker://reg.example:5000/app:1.2" }, { "/nvme/app.sqsh" } },
    /* no tag, DST: the ":/" is DST, not a tag */
    { "docker://reg.example/app:/nvme/x/", 0, NULL, 1,
      { "docker://reg.example/app:latest" }, { "/nvme/x/app+latest.sqsh" } },
    { "docker://reg.example/app@sha256:"
      "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef:/nvme/d", 0, NULL, 1,
      { "docker://reg.example/app@sha256:"
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" }, { "/nvme/d" } },
    /* with file images in one value; DST escapes still apply */
    { "/a.sqsh,docker://reg.example/a.b/c_d/e--f:t_1.x-y:/nvme/y\\:z", 0, NULL, 2,
      { "/a.sqsh", "docker://reg.example/a.b/c_d/e--f:t_1.x-y" },
      { DEFDIR "/a.sqsh", "/nvme/y:z" } },

    /* ---- rejected ---- */
    { "", EINVAL, "empty value", 0, { NULL }, { NULL } },
    /* registry images: the bad part is named */
    { "docker://app:1.0", EINVAL, "names no registry", 0, { NULL }, { NULL } },
    { "docker://", EINVAL, "the image reference after docker:// is empty", 0, { NULL },
      { NULL } },
    /* a registry without a repository, and a scheme stagehand does not read */
    { "docker://reg:5000", EINVAL, "if it is the registry, the repository is missing", 0,
      { NULL }, { NULL } },
    { "docker:/r.x/a:1", EINVAL, "a registry image is written docker://", 0, { NULL },
      { NULL } },
    { "https://r.x/a:1", EINVAL, "a registry image is written docker://", 0, { NULL },
      { NULL } },
    { "docker://reg.example/App:1", EINVAL, "component 'App' is not lower case", 0,
      { NULL }, { NULL } },
    { "docker://reg.example/a..b", EINVAL, "component 'a..b' is not valid", 0, { NULL },
      { NULL } },
    { "docker://reg.example//a", EINVAL, "component '' is not valid", 0, { NULL }, { NULL } },
    { "docker://reg.example/", EINVAL, "no repository", 0, { NULL }, { NULL } },
    { "docker://reg.example/app:", EINVAL, "tag '' is not valid", 0, { NULL }, { NULL } },
    { "docker://reg.example/app:1.0:nvme/x", EINVAL, "tag '1.0:nvme/x' is not valid", 0,
      { NULL }, { NULL } },
    { "docker://reg.example/app:.hidden", EINVAL, "tag '.hidden'", 0, { NULL }, { NULL } },
    { "docker://reg.example/app@sha256:abc", EINVAL, "digest 'sha256:abc'", 0, { NULL },
      { NULL } },
    { "docker://reg.example/app@md5:0123456789abcdef0123456789abcdef", EINVAL,
      "digest 'md5:", 0, { NULL }, { NULL } },
    { "docker://reg.example/app:1@sha256:"
      "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", EINVAL,
      "both a tag and a digest", 0, { NULL }, { NULL } },
    { "docker://reg.example:99999/app", EINVAL, "registry 'reg.example:99999' has a bad port",
      0, { NULL }, { NULL } },
    { "docker://reg_x#app", EINVAL, "registry 'reg_x' is not a host name", 0, { NULL },
      { NULL } },
    { "docker://#app", EINVAL, "empty registry host", 0, { NULL }, { NULL } },
    { "docker://r.x#a#b", EINVAL, "more than one '#'", 0, { NULL }, { NULL } },
    { "docker://r.x/a b", EINVAL, "contains ' '", 0, { NULL }, { NULL } },
    { "docker://r.x/a\\b", EINVAL, "contains '\\'", 0, { NULL }, { NULL } },
    { "docker://r.x/a:/nvme/x:/y", EINVAL, "more than one unescaped ':'", 0, { NULL },
      { NULL } },
    { "docker://r.x/a:", EINVAL, "tag '' is not valid", 0, { NULL }, { NULL } },
    { "docker://r.x/a:/nvme/x,docker://r.x/b:/nvme/x", EINVAL,
      "specified multiple times with different sources", 0, { NULL }, { NULL } },
    /* case F28: relative paths */
    { "img.sqsh", EINVAL, "not an absolute path", 0, { NULL }, { NULL } },
    { "./img.sqsh:/nvme/x", EINVAL, "not an absolute path", 0, { NULL },
      { NULL } },
    { "~/img.sqsh", EINVAL, "not an absolute path", 0, { NULL }, { NULL } },
    { "/a.sqsh:nvme/x", EINVAL, "destination 'nvme/x' is not an absolute",
      0, { NULL }, { NULL } },
    /* ambiguous ':' and ',' get the escaped spelling */
    { "/data/a:b.sqsh", EINVAL, "/data/a\\:b.sqsh", 0, { NULL }, { NULL } },
    { "/data/a,b.sqsh", EINVAL, "write it as '\\,'", 0, { NULL }, { NULL } },
    { "/a:/b:/c", EINVAL, "more than one unescaped ':'", 0, { NULL },
      { NULL } },
    { "/a:/nvme/x:", EINVAL, "more than one unescaped ':'", 0, { NULL },
      { NULL } },
    /* '..' components */
    { "/a/../etc/shadow:/nvme/x", EINVAL, "'..'", 0, { NULL }, { NULL } },
    { "/a.sqsh:/nvme/../etc/x", EINVAL, "'..'", 0, { NULL }, { NULL } },
    { "/a.sqsh:/nvme/..", EINVAL, "'..'", 0, { NULL }, { NULL } },
    /* empty parts */
    { "/a.sqsh:", EINVAL, "empty destination", 0, { NULL }, { NULL } },
    { ":/nvme/x", EINVAL, "empty source", 0, { NULL }, { NULL } },
    { "/a.sqsh,,/b.sqsh", EINVAL, "empty image", 0, { NULL }, { NULL } },
    { "/a.sqsh,", EINVAL, "empty image", 0, { NULL }, { NULL } },
    { ",/a.sqsh", EINVAL, "empty image", 0, { NULL }, { NULL } },
    { ":", EINVAL, "empty source", 0, { NULL }, { NULL } },
    /* control characters */
    { "/a\x01" "b:/nvme/x", EINVAL, "byte 0x01", 0, { NULL }, { NULL } },
    { "/a.sqsh:/nvme/x\ty", EINVAL, "byte 0x09", 0, { NULL }, { NULL } },
    { "/a\x7f", EINVAL, "byte 0x7f", 0, { NULL }, { NULL } },
    { "/a\nb", EINVAL, "control character", 0, { NULL }, { NULL } },
    /* C1 controls in UTF-8: U+009B is CSI to a terminal showing the log */
    { "/a\xc2\x9b" "31mb:/nvme/x", EINVAL, "control character (U+009B, bytes 0xc2 0x9b)",
      0, { NULL }, { NULL } },
    { "/a.sqsh:/nvme/x\xc2\x85", EINVAL, "U+0085", 0, { NULL }, { NULL } },
    { "/\xc2\xa0nbsp.sqsh:/nvme/\xc2\xa0", 0, NULL, 1, { "/\xc2\xa0nbsp.sqsh" },
      { "/nvme/\xc2\xa0" } },
    /* escapes */
    { "/a\\q:/nvme/x", EINVAL, "invalid escape '\\q'", 0, { NULL },
      { NULL } },
    { "/a\\\x01", EINVAL, "invalid escape '\\\\x01'", 0, { NULL }, { NULL } },
    { "/a.sqsh\\", EINVAL, "lone '\\'", 0, { NULL }, { NULL } },
    /* SRC must name a file */
    { "/dir/:/nvme/x", EINVAL, "ends in '/'", 0, { NULL }, { NULL } },
    { "/dir/.:/nvme/x", EINVAL, "ends in '/'", 0, { NULL }, { NULL } },
    { "/", EINVAL, "ends in '/'", 0, { NULL }, { NULL } },
    /* DST is SRC */
    { "/x/a.sqsh:/x//./a.sqsh", EINVAL, "is the source itself", 0, { NULL },
      { NULL } },
    { "/a.sqsh:/", EINVAL, "is the source itself", 0, { NULL }, { NULL } },
    /* case F27: one DST, two sources */
    { "/a:/nvme/x,/b:/nvme/x", EINVAL,
      "specified multiple times with different sources", 0, { NULL },
      { NULL } },
    { "/a:/nvme/x,/b:/nvme/x/y", EINVAL, "overlap", 0, { NULL }, { NULL } },
    { "/a,/b/a", EINVAL, "specified multiple times", 0, { NULL }, { NULL } },
    /* two sources of one file name collide in the default directory */
    { "/x/img.sqsh,/y/img.sqsh", EINVAL,
      "two sources of the same file name; give one of them its own "
      "destination (SRC:DST)", 0, { NULL }, { NULL } },
};

static void check_case(const struct value_case *c)
{
    struct sh_spec_set *set = sh_spec_set_new();
    char err[1024] = "";
    int rc;

    ck_assert_ptr_nonnull(set);
    errno = 0;
    rc = sh_spec_add_value(set, c->value, DEFDIR, err, sizeof(err));
    if (c->err == 0) {
        ck_assert_msg(rc == 0, "'%s' rejected: %s", c->value, err);
        ck_assert_uint_eq(sh_spec_set_count(set), c->n);
        for (size_t i = 0; i < c->n; i++) {
            ck_assert_str_eq(sh_spec_set_src(set, i), c->src[i]);
            ck_assert_str_eq(sh_spec_set_dst(set, i), c->dst[i]);
            ck_assert_str_eq(sh_spec_set_origin(set, i), c->value);
        }
    } else {
        ck_assert_msg(rc == -1, "'%s' accepted", c->value);
        ck_assert_msg(errno == c->err, "'%s': errno %d, want %d (%s)",
                      c->value, errno, c->err, err);
        ck_assert_msg(strstr(err, c->msg) != NULL,
                      "'%s': message '%s' lacks '%s'", c->value, err, c->msg);
        ck_assert_uint_eq(sh_spec_set_count(set), 0);
    }
    sh_spec_set_free(set);
}

START_TEST(value_corpus)
{
    check_case(&corpus[_i]);
}
END_TEST

/* Every accepted value survives the wire form unchanged. */
START_TEST(wire_round_trip_corpus)
{
    const struct value_case *c = &corpus[_i];
    struct sh_spec_set *set, *back;
    char err[1024] = "";
    char *wire, *again;

    if (c->err != 0)
        return;
    set = sh_spec_set_new();
    ck_assert_int_eq(sh_spec_add_value(set, c->value, DEFDIR, err,
                                       sizeof(err)), 0);
    wire = sh_spec_set_serialize(set);
    ck_assert_ptr_nonnull(wire);
    ck_assert(strncmp(wire, "v1;", 3) == 0);
    for (const char *p = wire; *p != '\0'; p++) /* printable, no spaces */
        ck_assert_msg(*p > 0x20 && *p < 0x7f, "byte 0x%02x in %s",
                      (unsigned)(unsigned char)*p, wire);
    back = sh_spec_set_deserialize(wire, err, sizeof(err));
    ck_assert_msg(back != NULL, "'%s' -> '%s': %s", c->value, wire, err);
    ck_assert_uint_eq(sh_spec_set_count(back), sh_spec_set_count(set));
    for (size_t i = 0; i < sh_spec_set_count(set); i++) {
        ck_assert_str_eq(sh_spec_set_src(back, i), sh_spec_set_src(set, i));
        ck_assert_str_eq(sh_spec_set_dst(back, i), sh_spec_set_dst(set, i));
        ck_assert_ptr_null(sh_spec_set_origin(back, i));
    }
    again = sh_spec_set_serialize(back);
    ck_assert_str_eq(again, wire);
    free(again);
    free(wire);
    sh_spec_set_free(back);
    sh_spec_set_free(set);
}
END_TEST

START_TEST(wire_exact_form)
{
    struct sh_spec_set *set = sh_spec_set_new();
    char err[512];
    char *wire;

    ck_assert_int_eq(sh_spec_add_value(set,
                                       "/data/run\\:3\\,final.sqsh:/nvme/x,"
                                       "/d/caf\xe9 %;.sqsh", DEFDIR, err,
                                       sizeof(err)), 0);
    wire = sh_spec_set_serialize(set);
    ck_assert_str_eq(wire, "v1;/data/run%3A3%2Cfinal.sqsh:/nvme/x,"
                           "/d/caf%E9%20%25%3B.sqsh:/nvme/stage/alice/"
                           "caf%E9%20%25%3B.sqsh");
    free(wire);
    sh_spec_set_free(set);
}
END_TEST

START_TEST(wire_empty_set)
{
    struct sh_spec_set *set = sh_spec_set_new();

    errno = 0;
    ck_assert_ptr_null(sh_spec_set_serialize(set));
    ck_assert_int_eq(errno, EINVAL);
    sh_spec_set_free(set);
}
END_TEST

struct wire_case {
    const char *text;
    int err;
    const char *msg;
};

static const struct wire_case bad_wire[] = {
    /* case F26: another format version is refused, naming both */
    { "v2;/a:/nvme/a", ENOTSUP, "version 2" },
    { "v0;/a:/nvme/a", ENOTSUP, "this node reads version 1" },
    { "v12;/a:/nvme/a", ENOTSUP, "restart slurmd" },
    { "", EINVAL, "not a stagehand spec" },
    { "/a:/nvme/a", EINVAL, "not a stagehand spec" },
    { "v;/a:/nvme/a", EINVAL, "not a stagehand spec" },
    { "v1/a:/nvme/a", EINVAL, "not a stagehand spec" },
    { "v1234567890;/a:/b", EINVAL, "not a stagehand spec" },
    { "v1;", EINVAL, "no image" },
    { "v1;/a", EINVAL, "without ':'" },
    { "v1;/a:/b:/c", EINVAL, "two ':'" },
    { "v1;/a:/nvme/a,", EINVAL, "without ':'" },
    { "v1;/a%3a:/nvme/a", EINVAL, "bad %-escape" },
    { "v1;/a%3:/nvme/a", EINVAL, "bad %-escape" },
    { "v1;/%41:/nvme/a", EINVAL, "needless" },
    { "v1;/a%00b:/nvme/a", EINVAL, "NUL" },
    { "v1;/a b:/nvme/a", EINVAL, "unescaped byte 0x20" },
    { "v1;/a\\:b:/nvme/a", EINVAL, "unescaped byte 0x5c" },
    { "v1;/a:/nvme/a,/a:/nvme/a", EINVAL, "not canonical" },
    { "v1;/a/../b:/nvme/a", EINVAL, "'..'" },
    { "v1;/a//b:/nvme/a", EINVAL, "normal form" },
    { "v1;/a/:/nvme/a", EINVAL, "normal form" },
    { "v1;/:/nvme/a", EINVAL, "normal form" },
    { "v1;rel:/nvme/a", EINVAL, "not an absolute path" },
    { "v1;/a:/nvme/x,/b:/nvme/x", EINVAL, "different sources" },
    { "v1;/a:/a", EINVAL, "source itself" },
    { "v1;/a%01:/nvme/a", EINVAL, "control character" },
};

START_TEST(wire_rejects)
{
    const struct wire_case *c = &bad_wire[_i];
    char err[1024] = "";
    struct sh_spec_set *set;

    errno = 0;
    set = sh_spec_set_deserialize(c->text, err, sizeof(err));
    ck_assert_msg(set == NULL, "'%s' accepted", c->text);
    ck_assert_msg(errno == c->err, "'%s': errno %d want %d (%s)", c->text,
                  errno, c->err, err);
    ck_assert_msg(strstr(err, c->msg) != NULL, "'%s': '%s' lacks '%s'",
                  c->text, err, c->msg);
}
END_TEST

/* case F27: Slurm calls the option callback twice, users repeat values in
 * #SBATCH and on the command line: identical values are no-ops. */
START_TEST(repeat_is_noop)
{
    struct sh_spec_set *set = sh_spec_set_new();
    char err[512];

    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(sh_spec_add_value(set, "/a.sqsh:/nvme/a,/b.sqsh",
                                           DEFDIR, err, sizeof(err)), 0);
    ck_assert_int_eq(sh_spec_add_value(set, "/b.sqsh", DEFDIR, err,
                                       sizeof(err)), 0);
    ck_assert_uint_eq(sh_spec_set_count(set), 2);
    /* a new image in a later value accumulates */
    ck_assert_int_eq(sh_spec_add_value(set, "/c.sqsh:/nvme/c", DEFDIR, err,
                                       sizeof(err)), 0);
    ck_assert_uint_eq(sh_spec_set_count(set), 3);
    ck_assert_str_eq(sh_spec_set_dst(set, 2), "/nvme/c");
    ck_assert_str_eq(sh_spec_set_origin(set, 2), "/c.sqsh:/nvme/c");
    sh_spec_set_free(set);
}
END_TEST

/* case F27: a conflict with an earlier value is refused and leaves the set
 * as it was, also when the value's first image was fine. */
START_TEST(conflict_is_atomic)
{
    struct sh_spec_set *set = sh_spec_set_new();
    char err[512] = "";

    ck_assert_int_eq(sh_spec_add_value(set, "/a.sqsh:/nvme/x", DEFDIR, err,
                                       sizeof(err)), 0);
    ck_assert_int_eq(sh_spec_add_value(set, "/new.sqsh:/nvme/n,"
                                       "/b.sqsh:/nvme/x", DEFDIR, err,
                                       sizeof(err)), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "destination '/nvme/x' specified "
                                      "multiple times with different "
                                      "sources ('/a.sqsh' and '/b.sqsh')"));
    /* different file names: no hint about default destinations */
    ck_assert_ptr_null(strstr(err, "same file name"));
    ck_assert_uint_eq(sh_spec_set_count(set), 1);
    ck_assert_int_eq(sh_spec_add_value(set, "/new.sqsh:/nvme/n,relative",
                                       DEFDIR, err, sizeof(err)), -1);
    ck_assert_uint_eq(sh_spec_set_count(set), 1);
    sh_spec_set_free(set);
}
END_TEST

START_TEST(no_default_dir)
{
    struct sh_spec_set *set = sh_spec_set_new();
    char err[512] = "";

    ck_assert_int_eq(sh_spec_add_value(set, "/a.sqsh", NULL, err,
                                       sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "no destination given"));
    ck_assert_int_eq(sh_spec_add_value(set, "/a.sqsh:/nvme/a", NULL, err,
                                       sizeof(err)), 0);
    sh_spec_set_free(set);
}
END_TEST

/* Limits: PATH_MAX, NAME_MAX, value size, image count. */
START_TEST(limits)
{
    struct sh_spec_set *set = sh_spec_set_new();
    char err[1024] = "";
    size_t big = PATH_MAX + 16;
    char *v = malloc(SH_SPEC_MAX_VALUE + 2);

    /* path of PATH_MAX bytes (raw) */
    v[0] = '/';
    for (size_t i = 1; i < big; i++)
        v[i] = (i % 100 == 0) ? '/' : 'a';
    v[big] = '\0';
    ck_assert_int_eq(sh_spec_add_value(set, v, DEFDIR, err, sizeof(err)), -1);
    ck_assert_int_eq(errno, ENAMETOOLONG);
    ck_assert_ptr_nonnull(strstr(err, "PATH_MAX"));
    /* just under PATH_MAX is fine as SRC (DST given short) */
    memcpy(v + PATH_MAX - 1, ":/nvme/x", 9);
    ck_assert_int_eq(sh_spec_add_value(set, v, DEFDIR, err, sizeof(err)), 0);
    /* component longer than NAME_MAX */
    v[0] = '/';
    memset(v + 1, 'b', NAME_MAX + 1);
    memcpy(v + NAME_MAX + 2, ":/nvme/y", 9);
    ck_assert_int_eq(sh_spec_add_value(set, v, DEFDIR, err, sizeof(err)), -1);
    ck_assert_int_eq(errno, ENAMETOOLONG);
    ck_assert_ptr_nonnull(strstr(err, "NAME_MAX"));
    /* value too long */
    memset(v, '/', SH_SPEC_MAX_VALUE + 1);
    v[SH_SPEC_MAX_VALUE + 1] = '\0';
    ck_assert_int_eq(sh_spec_add_value(set, v, DEFDIR, err, sizeof(err)), -1);
    ck_assert_int_eq(errno, E2BIG);
    free(v);
    sh_spec_set_free(set);

    /* more than SH_SPEC_MAX_IMAGES images */
    set = sh_spec_set_new();
    for (int i = 0; i < SH_SPEC_MAX_IMAGES; i++) {
        char one[64];

        snprintf(one, sizeof(one), "/img%d.sqsh", i);
        ck_assert_int_eq(sh_spec_add_value(set, one, DEFDIR, err,
                                           sizeof(err)), 0);
    }
    ck_assert_int_eq(sh_spec_add_value(set, "/one-more", DEFDIR, err,
                                       sizeof(err)), -1);
    ck_assert_int_eq(errno, E2BIG);
    ck_assert_uint_eq(sh_spec_set_count(set), SH_SPEC_MAX_IMAGES);
    sh_spec_set_free(set);
}
END_TEST

/* DEFDIR + basename longer than PATH_MAX */
START_TEST(default_dst_too_long)
{
    struct sh_spec_set *set = sh_spec_set_new();
    char dir[PATH_MAX], err[1024] = "";
    size_t n = PATH_MAX - 10;

    dir[0] = '/';
    for (size_t i = 1; i < n; i++)
        dir[i] = (i % 200 == 0) ? '/' : 'd';
    dir[n] = '\0';
    ck_assert_int_eq(sh_spec_add_value(set, "/src/abcdefghijkl.sqsh", dir,
                                       err, sizeof(err)), -1);
    ck_assert_int_eq(errno, ENAMETOOLONG);
    sh_spec_set_free(set);
}
END_TEST

/* default_registry: references without a registry use it; the spec's SRC
 * names it, so the agent does not need the setting. */
START_TEST(default_registry)
{
    struct sh_spec_set *set = sh_spec_set_new();
    char err[512] = "";

    ck_assert_int_eq(sh_spec_set_default_registry(set, "Reg.Site:5000"), 0);
    ck_assert_msg(sh_spec_add_value(set, "docker://team/app:2,docker://app", DEFDIR, err,
                                    sizeof(err)) == 0, "%s", err);
    ck_assert_str_eq(sh_spec_set_src(set, 0), "docker://reg.site:5000/team/app:2");
    ck_assert_str_eq(sh_spec_set_src(set, 1), "docker://reg.site:5000/app:latest");
    ck_assert_int_eq(sh_spec_set_default_registry(set, "bad host"), 0);
    ck_assert_int_eq(sh_spec_add_value(set, "docker://x", DEFDIR, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "registry 'bad host'") != NULL, "%s", err);
    sh_spec_set_free(set);
}
END_TEST

/* The wire form's docker:// sources must be canonical references. */
START_TEST(wire_ref_rejects)
{
    static const char *const bad[] = {
        "v1;docker%3A//r.x/App%3A1:/nvme/x",      /* upper case */
        "v1;docker%3A//r.x/a:/nvme/x",            /* no tag */
        "v1;docker%3A//a%3A1:/nvme/x",            /* no registry */
        "v1;docker%3A//R.x/a%3A1:/nvme/x",        /* registry not lower case */
        "v1;docker%3A//r.x%23a%3A1:/nvme/x",      /* '#' form */
        "v1;docker%3A//r.x/a%3A1:nvme/x",         /* relative DST */
    };
    char err[512];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct sh_spec_set *set = sh_spec_set_deserialize(bad[i], err, sizeof(err));

        ck_assert_msg(set == NULL, "'%s' accepted", bad[i]);
        ck_assert_int_eq(errno, EINVAL);
    }
}
END_TEST

/* Importer and resolver commands: ','-joined arguments, placeholders. */
START_TEST(ref_commands)
{
    struct sh_ref ref;
    char err[256];
    char **argv;

    ck_assert_int_eq(sh_ref_parse("r.x:5000/t/app:v2", 17, NULL, &ref, err, sizeof(err)), 0);
    argv = sh_ref_command_expand("/bin/res,--x=%%,%r,%t", &ref, NULL);
    ck_assert_ptr_nonnull(argv);
    ck_assert_str_eq(argv[0], "/bin/res");
    ck_assert_str_eq(argv[1], "--x=%");
    ck_assert_str_eq(argv[2], "r.x:5000/t/app:v2");
    ck_assert_str_eq(argv[3], "v2");
    ck_assert_ptr_null(argv[4]);
    sh_ref_command_free(argv);
    memcpy(ref.digest, "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
           72);
    argv = sh_ref_command_expand("/e,import,-o,%o,docker://%R#%p@%d,%r", &ref, "/tmp/x/o.sqsh");
    ck_assert_ptr_nonnull(argv);
    ck_assert_str_eq(argv[3], "/tmp/x/o.sqsh");
    ck_assert_str_eq(argv[4], "docker://r.x:5000#t/app@sha256:0123456789abcdef0123456789abcdef"
                              "0123456789abcdef0123456789abcdef");
    ck_assert_str_eq(argv[5], "r.x:5000/t/app@sha256:0123456789abcdef0123456789abcdef"
                              "0123456789abcdef0123456789abcdef");
    sh_ref_command_free(argv);
    ck_assert(sh_ref_registry_listed("a.b,R.X:5000", "r.x:5000"));
    ck_assert(!sh_ref_registry_listed("a.b,r.x", "r.x:5000"));
    ck_assert(!sh_ref_registry_listed("", "r.x"));
    ck_assert(sh_ref_registry_listed("*", "r.x"));
}
END_TEST

START_TEST(path_helpers)
{
    char out[PATH_MAX], err[512];

    ck_assert(sh_spec_path_is_under("/nvme/x", "/nvme"));
    ck_assert(sh_spec_path_is_under("/nvme/a/b", "/nvme/a"));
    ck_assert(!sh_spec_path_is_under("/nvme2/x", "/nvme"));
    ck_assert(!sh_spec_path_is_under("/nvme", "/nvme"));
    ck_assert(!sh_spec_path_is_under("/nv", "/nvme"));
    ck_assert(sh_spec_path_is_under("/x", "/"));
    ck_assert(!sh_spec_path_is_under("/", "/"));

    ck_assert_int_eq(sh_spec_path_normalize("/a//b/./c/", out, sizeof(out),
                                            err, sizeof(err)), 0);
    ck_assert_str_eq(out, "/a/b/c");
    ck_assert_int_eq(sh_spec_path_normalize("///", out, sizeof(out), NULL,
                                            0), 0);
    ck_assert_str_eq(out, "/");
    ck_assert_int_eq(sh_spec_path_normalize("a/b", out, sizeof(out), err,
                                            sizeof(err)), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(sh_spec_path_normalize("/abcdef", out, 4, NULL, 0), -1);
    ck_assert_int_eq(errno, ENAMETOOLONG);

    ck_assert_int_eq(sh_spec_escape_path("/a:b,c\\d", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "/a\\:b\\,c\\\\d");
    ck_assert_int_eq(sh_spec_escape_path("/a:b", out, 4), -1);
    ck_assert_int_eq(errno, ENAMETOOLONG);

    ck_assert_str_eq(sh_spec_display("/a\x1b[2Jb", out, sizeof(out)),
                     "/a\\x1b[2Jb");
    ck_assert_str_eq(sh_spec_display("/abcdefghij", out, 8), "/abc...");
    /* bytes that are not UTF-8 are escaped; valid UTF-8 is kept */
    ck_assert_str_eq(sh_spec_display("/a\xff\xc3\x28" "b", out, sizeof(out)),
                     "/a\\xff\\xc3(b");
    ck_assert_str_eq(sh_spec_display("/\xc3\xa9t\xc3\xa9\xe2\x82", out, sizeof(out)),
                     "/\xc3\xa9t\xc3\xa9\\xe2\\x82");
    ck_assert_str_eq(sh_spec_display("/\xed\xa0\x80\xc0\xaf", out, sizeof(out)),
                     "/\\xed\\xa0\\x80\\xc0\\xaf");
    ck_assert_str_eq(sh_spec_display("/\xf0\x9f\x98\x80", out, sizeof(out)),
                     "/\xf0\x9f\x98\x80");
    ck_assert_str_eq(sh_spec_display("/ab\xff", out, 7), "/ab...");
    /* C1 controls are escaped although they are valid UTF-8 */
    ck_assert_str_eq(sh_spec_display("/a\xc2\x9b" "b\xc2\xa0", out, sizeof(out)),
                     "/a\\xc2\\x9bb\xc2\xa0");
}
END_TEST

static Suite *spec_suite(void)
{
    Suite *s = suite_create("spec");
    TCase *tc = tcase_create("spec");
    int n_corpus = (int)(sizeof(corpus) / sizeof(corpus[0]));
    int n_wire = (int)(sizeof(bad_wire) / sizeof(bad_wire[0]));

    tcase_add_loop_test(tc, value_corpus, 0, n_corpus);
    tcase_add_loop_test(tc, wire_round_trip_corpus, 0, n_corpus);
    tcase_add_test(tc, wire_exact_form);
    tcase_add_test(tc, wire_empty_set);
    tcase_add_loop_test(tc, wire_rejects, 0, n_wire);
    tcase_add_test(tc, repeat_is_noop);
    tcase_add_test(tc, conflict_is_atomic);
    tcase_add_test(tc, no_default_dir);
    tcase_add_test(tc, limits);
    tcase_add_test(tc, default_dst_too_long);
    tcase_add_test(tc, path_helpers);
    tcase_add_test(tc, default_registry);
    tcase_add_test(tc, wire_ref_rejects);
    tcase_add_test(tc, ref_commands);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sh_check_run(spec_suite());
}
