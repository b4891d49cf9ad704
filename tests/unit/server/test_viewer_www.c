/* test_viewer_www.c — where the real bin/deformd finds the viewer it serves at
 * /viewer/ (issue 14.4), started from a working directory that is NOT the
 * checkout:
 *  - default: next to the executable, <exe dir>/../server/www (bin/deformd of
 *    this checkout): /viewer/ answers 200 with the checkout's
 *    server/www/index.html, and the start-up log says where it serves from;
 *  - an installed prefix (<prefix>/bin/deformd, <prefix>/share/deformd/www):
 *    that directory's index.html;
 *  - neither: a start-up line "no viewer" naming the directories tried, and
 *    /viewer/ answers 404 with a JSON error saying so;
 *  - --www DIR (absolute, or relative to the working directory) overrides,
 *    and a --www without index.html is reported at start-up.
 */
#include "daemon_util.h"
#include <limits.h>

static CURL *C;
static char repo[PATH_MAX], elsewhere[PATH_MAX], checkout[PATH_MAX];

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    *len = fread(b, 1, (size_t)n, f);
    b[*len] = 0;
    fclose(f);
    return b;
}

/* The daemon log's first line containing every one of the (NULL-ended)
 * strings, copied to line; 0 when there is none. */
static int log_line(const char *log, char *line, size_t cap, const char *a, const char *b,
                    const char *c)
{
    FILE *f = fopen(log, "r");
    int found = 0;
    while (f && !found && fgets(line, (int)cap, f))
        found = strstr(line, a) && (!b || strstr(line, b)) && (!c || strstr(line, c));
    if (f) fclose(f);
    if (!found && cap) line[0] = 0;
    return found;
}

static void dump_log(const char *log)
{
    size_t n = 0;
    char *t = slurp(log, &n);
    fprintf(stderr, "--- %s\n%s---\n", log, t ? t : "(none)\n");
    free(t);
}

/* GET /viewer/ of a daemon: the status and body. */
static long get_viewer(const daemon_t *d, resp_t *r)
{
    if (http_req(C, d->port, "GET", "/viewer/", NULL, 0, NULL, r)) return -1;
    return r->status;
}

static int copy_exe(const char *dst_dir)
{
    char cmd[3 * PATH_MAX];
    char src[PATH_MAX];
    snprintf(src, sizeof src, "%s/deformd", bin_dir());
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s' '%s/deformd'", dst_dir, src, dst_dir);
    return system(cmd);
}

static void test_default_from_another_cwd(void)
{
    char www[PATH_MAX], idx[PATH_MAX + 16];
    snprintf(idx, sizeof idx, "%s/server/www/index.html", checkout);
    DF_CHECK_MSG(realpath("server/www", www) != NULL, "the checkout has no server/www");
    size_t n = 0;
    char *want = slurp(idx, &n);
    DF_CHECK_MSG(want && n > 0, "cannot read %s", idx);
    du_daemon_cwd = elsewhere;
    du_daemon_exe = NULL;
    daemon_t d;
    int started = daemon_start(&d, repo, "www_default", NULL) == 0;
    DF_CHECK(started);
    if (started && want) {
        resp_t r;
        long st = get_viewer(&d, &r);
        DF_CHECK_MSG(st == 200, "/viewer/ from %s answered %ld: %.200s", elsewhere, st, r.body);
        DF_CHECK_MSG(r.len == n && !memcmp(r.body, want, n),
                     "/viewer/ is not the checkout's index.html (%zu vs %zu bytes)", r.len, n);
        DF_CHECK(strstr(r.ctype, "text/html") != NULL);
        resp_free(&r);
        char line[4096], what[PATH_MAX + 64];
        snprintf(what, sizeof what, "serves %s ", www);
        DF_CHECK_MSG(log_line(d.log, line, sizeof line, "viewer: /viewer/", what, NULL),
                     "no start-up line saying /viewer/ serves %s", www);
        if (line[0]) printf("# %s", line);
    }
    if (!started) dump_log(d.log);
    daemon_stop(&d);
    free(want);
}

static void test_installed_prefix(void)
{
    char prefix[PATH_MAX], bin[PATH_MAX + 8], share[PATH_MAX + 32], idx[PATH_MAX + 48],
        exe[PATH_MAX + 16];
    snprintf(prefix, sizeof prefix, "%s/prefix", elsewhere);
    snprintf(bin, sizeof bin, "%s/bin", prefix);
    snprintf(share, sizeof share, "%s/share/deformd/www", prefix);
    snprintf(idx, sizeof idx, "%s/index.html", share);
    snprintf(exe, sizeof exe, "%s/deformd", bin);
    mkdirs(share);
    const char *marker = "<!doctype html><title>installed deformd viewer</title>\n";
    write_text(idx, marker);
    DF_CHECK(copy_exe(bin) == 0);
    du_daemon_cwd = elsewhere;
    du_daemon_exe = exe;
    daemon_t d;
    int started = daemon_start(&d, repo, "www_prefix", NULL) == 0;
    DF_CHECK(started);
    if (started) {
        resp_t r;
        long st = get_viewer(&d, &r);
        DF_CHECK_MSG(st == 200 && !strcmp(r.body, marker), "/viewer/ answered %ld: %.200s", st, r.body);
        resp_free(&r);
        char line[4096], what[PATH_MAX + 64];
        snprintf(what, sizeof what, "serves %s ", share);
        DF_CHECK_MSG(log_line(d.log, line, sizeof line, "viewer: /viewer/", what, NULL),
                     "no start-up line saying /viewer/ serves %s", share);
    } else {
        dump_log(d.log);
    }
    daemon_stop(&d);
    du_daemon_exe = NULL;
}

static void test_no_viewer(void)
{
    char bin[PATH_MAX + 16], exe[PATH_MAX + 32];
    snprintf(bin, sizeof bin, "%s/bare/bin", elsewhere);
    snprintf(exe, sizeof exe, "%s/deformd", bin);
    DF_CHECK(copy_exe(bin) == 0);
    du_daemon_cwd = elsewhere;
    du_daemon_exe = exe;
    daemon_t d;
    int started = daemon_start(&d, repo, "www_none", NULL) == 0;
    DF_CHECK(started);
    if (started) {
        resp_t r;
        long st = get_viewer(&d, &r);
        DF_CHECK_MSG(st == 404 && strstr(r.body, "\"error\"") && strstr(r.body, "no viewer"),
                     "/viewer/ answered %ld: %.200s", st, r.body);
        resp_free(&r);
        char line[4096], a[PATH_MAX + 64], b[PATH_MAX + 64];
        snprintf(a, sizeof a, "%s/../server/www", bin);
        snprintf(b, sizeof b, "%s/../share/deformd/www", bin);
        DF_CHECK_MSG(log_line(d.log, line, sizeof line, "no viewer", a, b),
                     "no start-up line saying there is no viewer and naming %s and %s", a, b);
        if (line[0]) printf("# %s", line);
        /* the API still serves */
        DF_CHECK(http_req(C, d.port, "GET", "/v2/health/ready", NULL, 0, NULL, &r) == 0 && r.status == 200);
        resp_free(&r);
    } else {
        dump_log(d.log);
    }
    daemon_stop(&d);
    du_daemon_exe = NULL;
}

static void test_explicit_www(void)
{
    char mine[PATH_MAX + 16], idx[PATH_MAX + 32];
    snprintf(mine, sizeof mine, "%s/mywww", elsewhere);
    snprintf(idx, sizeof idx, "%s/index.html", mine);
    mkdirs(mine);
    const char *marker = "<!doctype html><title>my own viewer</title>\n";
    write_text(idx, marker);
    du_daemon_cwd = elsewhere;
    du_daemon_exe = NULL;
    /* absolute, then relative to the daemon's working directory */
    const char *dirs[2] = {mine, "mywww"};
    for (int k = 0; k < 2; k++) {
        const char *extra[] = {"--www", dirs[k], NULL};
        daemon_t d;
        int started = daemon_start(&d, repo, k ? "www_rel" : "www_abs", extra) == 0;
        DF_CHECK(started);
        if (!started) { dump_log(d.log); continue; }
        resp_t r;
        long st = get_viewer(&d, &r);
        DF_CHECK_MSG(st == 200 && !strcmp(r.body, marker), "--www %s: /viewer/ answered %ld: %.200s",
                     dirs[k], st, r.body);
        resp_free(&r);
        char line[4096], what[PATH_MAX + 64];
        snprintf(what, sizeof what, "serves %s ", mine);
        DF_CHECK_MSG(log_line(d.log, line, sizeof line, "viewer: /viewer/", what, "www"),
                     "--www %s: no start-up line saying /viewer/ serves %s", dirs[k], mine);
        daemon_stop(&d);
    }
    /* an explicit directory without index.html: said at start-up */
    const char *extra[] = {"--www", "no-such-www", NULL};
    daemon_t d;
    int started = daemon_start(&d, repo, "www_missing", extra) == 0;
    DF_CHECK(started);
    if (started) {
        char line[4096];
        DF_CHECK_MSG(log_line(d.log, line, sizeof line, "no viewer", "no-such-www", NULL),
                     "no start-up line about --www no-such-www");
        resp_t r;
        DF_CHECK(get_viewer(&d, &r) == 404);
        resp_free(&r);
    } else {
        dump_log(d.log);
    }
    daemon_stop(&d);
}

int main(void)
{
    if (!getcwd(checkout, sizeof checkout)) return 2;
    char rel[1024];
    snprintf(rel, sizeof rel, "%s/www_repo", test_out());
    du_abs(repo, sizeof repo, rel);
    snprintf(rel, sizeof rel, "%s/elsewhere", test_out());
    du_abs(elsewhere, sizeof elsewhere, rel);
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", repo, elsewhere);
    if (system(cmd)) return 2;
    make_repo(repo);
    mkdirs(elsewhere);
    curl_global_init(CURL_GLOBAL_ALL);
    C = curl_easy_init();
    DF_RUN(test_default_from_another_cwd);
    DF_RUN(test_installed_prefix);
    DF_RUN(test_no_viewer);
    DF_RUN(test_explicit_www);
    curl_easy_cleanup(C);
    curl_global_cleanup();
    return test_out_done(dftest_exit());
}
