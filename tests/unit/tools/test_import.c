/* test_import.c — tools/deform/import_scene.c and import_util.c, below the command line.
 *
 * Structural invariants of an imported model (parents first, weights normalised, K <= 8) and
 * the bind rule on glTF2/simple_skin, whose numbers are in its .gltf: both inverse bind
 * matrices translate by (-0.5, -1, 0) and the joints sit at (0, 1, 0), so at rest every skin
 * matrix world_j * IBM_j must be a pure translation by (-0.5, 0, 0). world_j is recomputed
 * here from the stored local T, R, S with a quaternion formula written in this file.
 * Error paths: missing file, a file with 11 influences on a vertex (written here as SMD).
 */
#include "dftest.h"
#include "import.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SIMPLE_SKIN "/usr/share/assimp/models/glTF2/simple_skin/simple_skin.gltf"

static void local_matrix(const float t[3], const float q[4], const float s[3], double m[16])
{
    double x = q[0], y = q[1], z = q[2], w = q[3];
    double n = sqrt(x * x + y * y + z * z + w * w);
    x /= n; y /= n; z /= n; w /= n;
    double r[9] = {1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w),
                   2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w),
                   2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)};
    memset(m, 0, 16 * sizeof *m);
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++) m[i * 4 + j] = r[i * 3 + j] * s[j];
        m[i * 4 + 3] = t[i];
    }
    m[15] = 1;
}

static void mul(const double a[16], const double b[16], double o[16])
{
    double r[16];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            r[i * 4 + j] = 0;
            for (int k = 0; k < 4; k++) r[i * 4 + j] += a[i * 4 + k] * b[k * 4 + j];
        }
    memcpy(o, r, sizeof r);
}

static void test_simple_skin_structure_and_bind(void)
{
    df_rigged_data_t d;
    df__import_summary_t s;
    df_error_t err = {0};
    df__import_opts_t o = {.skinning = "lbs"};
    int rc = df__import_scene(SIMPLE_SKIN, &o, &d, &s, &err);
    DF_CHECK_MSG(rc == DF_OK, "%s", err.msg);
    if (rc) return;
    DF_CHECK(d.n_vertices == 10);
    DF_CHECK(d.n_triangles == 8);
    DF_CHECK(d.n_joints == 3);
    DF_CHECK(d.n_influences == 2);
    DF_CHECK(d.n_clips == 1 && d.clips[0].n_keys == 12);
    DF_CHECK_NEAR(d.clips[0].times[11], 5.5, 1e-6);
    DF_CHECK(s.n_bones == 2);
    for (int64_t j = 0; j < d.n_joints; j++) DF_CHECK(d.parents[j] < j);
    for (int64_t v = 0; v < d.n_vertices; v++) {
        double sum = 0;
        for (int64_t k = 0; k < d.n_influences; k++) {
            DF_CHECK(d.skin_weights[v * d.n_influences + k] >= 0);
            DF_CHECK(d.skin_joints[v * d.n_influences + k] >= 0 &&
                     d.skin_joints[v * d.n_influences + k] < d.n_joints);
            sum += d.skin_weights[v * d.n_influences + k];
        }
        DF_CHECK_NEAR(sum, 1.0, 1e-6);
        /* heaviest first */
        if (d.n_influences > 1)
            DF_CHECK(d.skin_weights[v * d.n_influences] >= d.skin_weights[v * d.n_influences + 1]);
    }
    /* FK at rest, then skin matrices of the joints that carry weight */
    double world[3][16];
    for (int64_t j = 0; j < d.n_joints; j++) {
        double l[16];
        local_matrix(d.rest_translations + j * 3, d.rest_rotations + j * 4, d.rest_scales + j * 3, l);
        if (d.parents[j] >= 0) mul(world[d.parents[j]], l, world[j]);
        else memcpy(world[j], l, sizeof l);
    }
    int used[3] = {0};
    for (int64_t i = 0; i < d.n_vertices * d.n_influences; i++)
        if (d.skin_weights[i] > 0) used[d.skin_joints[i]] = 1;
    int n_used = 0;
    for (int j = 0; j < 3; j++) {
        if (!used[j]) continue;
        n_used++;
        double ibm[16], sk[16];
        for (int k = 0; k < 16; k++) ibm[k] = d.inverse_bind[j * 16 + k];
        mul(world[j], ibm, sk);
        const double want[16] = {1, 0, 0, -0.5, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
        for (int k = 0; k < 16; k++) DF_CHECK_NEAR(sk[k], want[k], 1e-6);
    }
    DF_CHECK(n_used == 2);
    df__import_free(&d);
    DF_CHECK(d.positions == NULL);
}

static void test_missing_file(void)
{
    df_rigged_data_t d;
    df__import_summary_t s;
    df_error_t err = {0};
    DF_CHECK(df__import_scene("/nonexistent/x.fbx", NULL, &d, &s, &err) == DF_EIO);
    DF_CHECK(strstr(err.msg, "/nonexistent/x.fbx") != NULL);
}

static void test_too_many_influences(void)
{
    const char *dir = getenv("DF_TEST_OUT") ? getenv("DF_TEST_OUT") : "/tmp";
    char path[512];
    snprintf(path, sizeof path, "%s/test_import_many.smd", dir);
    mkdir(dir, 0777);
    FILE *f = fopen(path, "w");
    DF_CHECK(f != NULL);
    if (!f) return;
    fprintf(f, "version 1\nnodes\n");
    for (int i = 0; i < 11; i++) fprintf(f, "%d \"b%d\" %d\n", i, i, i - 1);
    fprintf(f, "end\nskeleton\ntime 0\n");
    for (int i = 0; i < 11; i++) fprintf(f, "%d 0 %d 0 0 0 0\n", i, i ? 1 : 0);
    fprintf(f, "end\ntriangles\nmat\n");
    const char *v[3] = {"0 0 0", "1 0 0", "0 1 0"};
    for (int t = 0; t < 3; t++) {
        fprintf(f, "0 %s 0 0 1 0 0 11", v[t]);
        for (int b = 0; b < 11; b++) fprintf(f, " %d %g", b, 1.0 / 11);
        fprintf(f, "\n");
    }
    fprintf(f, "end\n");
    fclose(f);
    df_rigged_data_t d;
    df__import_summary_t s;
    df_error_t err = {0};
    DF_CHECK(df__import_scene(path, NULL, &d, &s, &err) == DF_EUNSUPPORTED);
    DF_CHECK_MSG(strstr(err.msg, "vertex 0 has 11 influences; at most 8 are supported") != NULL,
                 "%s", err.msg);
    remove(path);
}

static void test_versions_and_dirs(void)
{
    const char *dir = getenv("DF_TEST_OUT") ? getenv("DF_TEST_OUT") : "/tmp";
    char base[512], p[600];
    snprintf(base, sizeof base, "%s/test_import_repo_%d/m", dir, (int)getpid());
    df_error_t err = {0};
    DF_CHECK(df__tool_latest_version(base) == 0);
    snprintf(p, sizeof p, "%s/3", base);
    DF_CHECK(df__tool_mkdirs(p, &err) == DF_OK);
    snprintf(p, sizeof p, "%s/12", base);
    DF_CHECK(df__tool_mkdirs(p, &err) == DF_OK);
    snprintf(p, sizeof p, "%s/notes", base);
    DF_CHECK(df__tool_mkdirs(p, &err) == DF_OK);
    DF_CHECK(df__tool_latest_version(base) == 12);
    for (const char *sub[] = {"3", "12", "notes", NULL}, **q = sub; *q; q++) {
        snprintf(p, sizeof p, "%s/%s", base, *q);
        rmdir(p);
    }
    rmdir(base);
    snprintf(p, sizeof p, "%s/test_import_repo_%d", dir, (int)getpid());
    rmdir(p);
}

int main(void)
{
    DF_RUN(test_simple_skin_structure_and_bind);
    DF_RUN(test_missing_file);
    DF_RUN(test_too_many_influences);
    DF_RUN(test_versions_and_dirs);
    return dftest_exit();
}
