/* checkpoint.c — the checkpoint directory (checkpoint.h): rank files, manifest, the atomic commit,
 * and the reader that validates all of it and assembles whole tensors from their parts. */
#include "checkpoint/checkpoint.h"

#include "common/os.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const ck_role_names[CK_NUM_ROLES] = {"param", "adam_m", "adam_v", "fp8_history", "expert_bias"};

/* The mesh axes a checkpoint records (the derived ones, edp and dp_cp, follow from them). */
static bool recorded_axis(int a) { return a != IR_AXIS_NONE && !ir_axis_derived((ir_axis)a); }

void ck_iter_dir(const char *dir, int64_t iteration, bool tmp, char *buf, size_t len)
{
    snprintf(buf, len, "%s/iter_%07lld%s", dir, (long long)iteration, tmp ? ".tmp" : "");
}

/* --- files written whole: fsynced, the directory too --- */

static bool sync_dir(const char *dir, char *err, size_t errlen)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    bool ok = fd >= 0 && fsync(fd) == 0;
    int e = errno;
    if (fd >= 0)
        close(fd);
    return ok || ck_fail(err, errlen, "%s: cannot fsync the directory: %s", dir, strerror(e));
}

static bool write_synced(const char *path, const char *text, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return ck_fail(err, errlen, "%s: cannot create: %s", path, strerror(errno));
    int e = os_write_all(fd, text, strlen(text));
    bool ok = e == 0 && fsync(fd) == 0;
    e = e ? e : errno;
    ok = close(fd) == 0 && ok;
    return ok || ck_fail(err, errlen, "%s: cannot write: %s", path, strerror(e ? e : errno));
}

static bool write_json(const char *path, json_t *j, char *err, size_t errlen)
{
    char *text = json_dumps(j, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    size_t n = strlen(text);
    text = realloc(text, n + 2);
    memcpy(text + n, "\n", 2);
    bool ok = write_synced(path, text, err, errlen);
    free(text);
    return ok;
}

/* Removes dir and the files in it (a checkpoint directory holds no subdirectories). */
static bool remove_dir(const char *dir, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT || ck_fail(err, errlen, "%s: cannot open: %s", dir, strerror(errno));
    struct dirent *e;
    char path[4352];
    bool ok = true;
    while (ok && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            ok = unlink(path) == 0 || ck_fail(err, errlen, "%s: cannot remove: %s", path, strerror(errno));
        }
    closedir(d);
    return ok && (rmdir(dir) == 0 || ck_fail(err, errlen, "%s: cannot remove: %s", dir, strerror(errno)));
}

bool ck_begin(const char *dir, int64_t iteration, char *err, size_t errlen)
{
    char tmp[4200];
    ck_iter_dir(dir, iteration, true, tmp, sizeof tmp);
    if (!os_mkdirs(dir, err, errlen) || !remove_dir(tmp, err, errlen))
        return false;
    return mkdir(tmp, 0755) == 0 || ck_fail(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
}

static json_t *axes_json(const int v[IR_NUM_AXES])
{
    json_t *o = json_object();
    for (int a = 0; a < IR_NUM_AXES; a++)
        if (recorded_axis(a))
            json_object_set_new(o, ir_axis_name((ir_axis)a), json_integer(v[a]));
    return o;
}

/* A checksum as the rank records spell it: 16 hex digits. */
static const char *checksum_hex(uint64_t sum, char hex[24])
{
    snprintf(hex, 24, "%016llx", (unsigned long long)sum);
    return hex;
}

bool ck_write_rank(const char *dir, int64_t iteration, int rank, const int degree[IR_NUM_AXES],
                   const int coord[IR_NUM_AXES], int n, const ck_part *parts, uint64_t *bytes, char *err,
                   size_t errlen)
{
    char tmp[4200], path[4300];
    ck_iter_dir(dir, iteration, true, tmp, sizeof tmp);
    snprintf(path, sizeof path, "%s/rank_%05d.safetensors", tmp, rank);
    ck_st_tensor *t = malloc(sizeof *t * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++)
        t[i] = (ck_st_tensor){parts[i].name, parts[i].part, parts[i].data, parts[i].fill, parts[i].ctx};
    static const char *const meta[] = {"format", "pt"}; /* what PyTorch's writer records */
    uint64_t size, sum, *sums = malloc(sizeof *sums * (size_t)(n + 1));
    bool ok = ck_st_write(path, n, t, 1, meta, &size, &sum, sums, err, errlen);
    free(t);
    if (!ok)
        return free(sums), false;
    json_t *j = json_object(), *tensors = json_object();
    char hex[24], layout[128];
    snprintf(path, sizeof path, "rank_%05d.safetensors", rank);
    json_object_set_new(j, "file", json_string(path));
    json_object_set_new(j, "bytes", json_integer((json_int_t)size));
    json_object_set_new(j, "crc32", json_string(checksum_hex(sum, hex)));
    json_object_set_new(j, "header_crc32", json_string(checksum_hex(sums[0], hex)));
    json_object_set_new(j, "mesh", axes_json(degree));
    json_object_set_new(j, "coords", axes_json(coord));
    for (int i = 0; i < n; i++)
        json_object_set_new(tensors, parts[i].name,
                            json_pack("{ssss}", "layout", ir_layout_str(&parts[i].layout, layout, sizeof layout),
                                      "crc32", checksum_hex(sums[1 + i], hex)));
    free(sums);
    json_object_set_new(j, "tensors", tensors);
    snprintf(path, sizeof path, "%s/rank_%05d.json", tmp, rank);
    ok = write_json(path, j, err, errlen);
    json_decref(j);
    if (ok && bytes)
        *bytes = size;
    return ok;
}

int ck_model_of(const ir_module *m, char **kv)
{
    int n = 0;
    for (int k = 0; k < IR_CFG_COUNT; k++) {
        const char *v = ir_cfgs[k].model ? ir_config_get(m, ir_cfgs[k].key) : NULL;
        if (v) {
            kv[2 * n] = (char *)ir_cfgs[k].key;
            kv[2 * n++ + 1] = (char *)v;
        }
    }
    return n;
}

static const char *model_value(const ck_state *s, const char *key)
{
    for (int i = 0; i < s->nmodel; i++)
        if (!strcmp(s->model[2 * i], key))
            return s->model[2 * i + 1];
    return NULL;
}

/* A config value as a person reads it: a number in 10 digits, a flag true or false. */
static void value_text(const ir_cfg_info *c, const char *v, char *buf, size_t len)
{
    if (c->type == IR_CFGT_NUM)
        snprintf(buf, len, "%.10g", strtod(v, NULL));
    else if (c->type == IR_CFGT_BOOL)
        snprintf(buf, len, "%s", strtoll(v, NULL, 10) ? "true" : "false");
    else
        snprintf(buf, len, "%.60s", v);
}

bool ck_model_recorded(const ck_state *s) { return model_value(s, ir_cfgs[IR_CFG_NORMALIZATION].key) != NULL; }

bool ck_model_same(const ck_state *s, const ir_module *m, ir_cfg ignore, const char *theirs, char *err, size_t errlen)
{
    for (int k = 0; k < IR_CFG_COUNT; k++) {
        const ir_cfg_info *c = &ir_cfgs[k];
        /* a rope model's max_position_embeddings is the context it was meant for (HF's config), not its function */
        bool context = k == IR_CFG_MAX_POSITION_EMBEDDINGS &&
                       !strcmp(model_value(s, ir_cfgs[IR_CFG_POSITION_EMBEDDING_TYPE].key) ?: "", "rope");
        const char *mine = c->model && k != (int)ignore && !context ? model_value(s, c->key) : NULL;
        const char *other = mine ? ir_config_get(m, c->key) : NULL;
        if (!other)
            continue;
        bool same = c->type == IR_CFGT_NUM ? strtod(mine, NULL) == strtod(other, NULL) : !strcmp(mine, other);
        if (same)
            continue;
        char a[80], b[80];
        value_text(c, mine, a, sizeof a);
        value_text(c, other, b, sizeof b);
        return ck_fail(err, errlen, "%s is %s in the checkpoint but %s in %s (%s)", c->key, a, b, theirs, c->meaning);
    }
    return true;
}

static json_t *manifest_json(const ck_state *s, int n, const ck_tensor *t)
{
    json_t *j = json_object(), *model = json_object(), *tensors = json_object();
    json_object_set_new(j, "format", json_string(CK_FORMAT));
    json_object_set_new(j, "version", json_integer(CK_VERSION));
    json_object_set_new(j, "iteration", json_integer(s->iteration));
    json_object_set_new(j, "consumed_samples", json_integer(s->consumed_samples));
    json_object_set_new(j, "steps_applied", json_integer(s->steps_applied));
    json_object_set_new(j, "evals_done", json_integer(s->evals_done));
    json_object_set_new(j, "seed", json_integer((json_int_t)s->seed));
    json_object_set_new(j, "mesh", axes_json(s->degree));
    for (int i = 0; i < s->nmodel; i++) {
        char *end;
        long long v = strtoll(s->model[2 * i + 1], &end, 10);
        json_object_set_new(model, s->model[2 * i], *end ? json_string(s->model[2 * i + 1]) : json_integer(v));
    }
    json_object_set_new(j, "model", model);
    for (int i = 0; i < n; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < t[i].whole.ndim; d++)
            json_array_append_new(shape, json_integer(t[i].whole.dims[d]));
        json_object_set_new(tensors, t[i].name,
                            json_pack("{ss ss ss so}", "role", ck_role_names[t[i].role], "param", t[i].param, "dtype",
                                      ck_st_dtype_name(t[i].whole.dtype), "shape", shape));
    }
    json_object_set_new(j, "tensors", tensors);
    json_object_set_new(j, "ranks", json_integer(s->ranks));
    return j;
}

/* iter_NNNNNNN exactly (not a .tmp or .old): a committed checkpoint's directory. */
static bool iter_name(const char *name, long long *it)
{
    if (strncmp(name, "iter_", 5) || strlen(name) != 12)
        return false;
    for (int i = 5; i < 12; i++)
        if (name[i] < '0' || name[i] > '9')
            return false;
    *it = atoll(name + 5);
    return true;
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* Keeps the newest keep committed checkpoints under dir, removing the older ones. */
static bool prune(const char *dir, int keep, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d)
        return ck_fail(err, errlen, "%s: cannot open: %s", dir, strerror(errno));
    long long *its = NULL, it;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (iter_name(e->d_name, &it)) {
            if (n == cap)
                its = realloc(its, sizeof *its * (cap = cap ? 2 * cap : 16));
            its[n++] = it;
        }
    closedir(d);
    qsort(its, n, sizeof *its, cmp_ll);
    bool ok = true;
    for (size_t i = 0; ok && i + (size_t)keep < n; i++) {
        char path[4200];
        ck_iter_dir(dir, its[i], false, path, sizeof path);
        ok = remove_dir(path, err, errlen);
    }
    free(its);
    return ok;
}

bool ck_commit(const char *dir, const ck_state *s, int ntensors, const ck_tensor *t, int keep, char *err,
               size_t errlen)
{
    char tmp[4200], final[4200], old[4300], path[4300];
    ck_iter_dir(dir, s->iteration, true, tmp, sizeof tmp);
    ck_iter_dir(dir, s->iteration, false, final, sizeof final);
    snprintf(path, sizeof path, "%s/manifest.json", tmp);
    json_t *j = manifest_json(s, ntensors, t);
    bool ok = write_json(path, j, err, errlen) && sync_dir(tmp, err, errlen);
    json_decref(j);
    if (!ok)
        return false;
    /* Saving an iteration again (a rerun into the same DIR): the older one is moved aside first,
     * under a name that is never loaded. */
    snprintf(old, sizeof old, "%s.old", final);
    struct stat st;
    if (stat(final, &st) == 0 && (!remove_dir(old, err, errlen) || rename(final, old) != 0))
        return ck_fail(err, errlen, "%s: cannot move the older checkpoint of this iteration aside: %s", final,
                    strerror(errno));
    if (rename(tmp, final) != 0)
        return ck_fail(err, errlen, "%s: cannot rename to %s: %s", tmp, final, strerror(errno));
    if (!sync_dir(dir, err, errlen) || !remove_dir(old, err, errlen))
        return false;
    char latest[4300], text[32];
    snprintf(path, sizeof path, "%s/%s.tmp", dir, CK_LATEST_FILE);
    snprintf(latest, sizeof latest, "%s/%s", dir, CK_LATEST_FILE);
    snprintf(text, sizeof text, "%lld", (long long)s->iteration); /* Megatron writes the number alone */
    if (!write_synced(path, text, err, errlen))
        return false;
    if (rename(path, latest) != 0)
        return ck_fail(err, errlen, "%s: cannot rename to %s: %s", path, latest, strerror(errno));
    return sync_dir(dir, err, errlen) && (keep <= 0 || prune(dir, keep, err, errlen));
}

/* --- reading --- */

/* Field key of object o as an integer >= 0, or false naming file and key. */
static bool get_int(const char *file, json_t *o, const char *key, int64_t *v, char *err, size_t errlen)
{
    json_t *x = json_object_get(o, key);
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return ck_fail(err, errlen, "%s: \"%s\" is %s: expected an integer >= 0", file, key,
                    x ? "not an integer >= 0" : "missing");
    *v = json_integer_value(x);
    return true;
}

static bool get_axes(const char *file, json_t *o, const char *key, int v[IR_NUM_AXES], int dflt, char *err,
                     size_t errlen)
{
    json_t *x = json_object_get(o, key);
    if (!json_is_object(x))
        return ck_fail(err, errlen, "%s: \"%s\" is missing or not an object of mesh axes", file, key);
    for (int a = 0; a < IR_NUM_AXES; a++)
        v[a] = dflt;
    const char *k;
    json_t *e;
    json_object_foreach(x, k, e) {
        int a = ir_axis_by_name(k);
        if (a <= 0 || !json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > 1 << 20)
            return ck_fail(err, errlen, "%s: \"%s\": \"%s\" is not a mesh axis with an integer", file, key, k);
        v[a] = (int)json_integer_value(e);
    }
    return true;
}

/* The derived axes' degrees (and with coord, world rank k's coordinates along them), which the
 * records leave out, from the recorded axes: ir_mesh_of's, as the saving ranks had them (ZeRO's
 * expert blocks are over edp, the dense ones' under cp over dp_cp). */
static void derive_axes(int degree[IR_NUM_AXES], int *coord, int k)
{
    ir_mesh mesh = ir_mesh_of(degree[IR_AXIS_TP], degree[IR_AXIS_CP], degree[IR_AXIS_DP], degree[IR_AXIS_PP],
                              degree[IR_AXIS_EP]);
    int c[IR_NUM_AXES];
    ir_mesh_coords(&mesh, k, c);
    for (int a = 1; a < IR_NUM_AXES; a++)
        if (ir_axis_derived((ir_axis)a)) {
            degree[a] = mesh.degree[a] > 0 ? mesh.degree[a] : 1;
            if (coord)
                coord[a] = c[a];
        }
}

static bool parse_shape(const char *file, const char *name, json_t *v, ir_type *t, char *err, size_t errlen)
{
    json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape");
    int d = json_is_string(dt) ? ck_st_dtype_by_name(json_string_value(dt)) : -1;
    if (d < 0 || !json_is_array(shape) || json_array_size(shape) > IR_MAX_DIMS)
        return ck_fail(err, errlen, "%s: tensor %s: needs \"dtype\" (F32, BF16, F16, I32, I64) and \"shape\" (at most %d "
                    "sizes)", file, name, IR_MAX_DIMS);
    int64_t dims[IR_MAX_DIMS];
    for (size_t i = 0; i < json_array_size(shape); i++) {
        json_t *x = json_array_get(shape, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0)
            return ck_fail(err, errlen, "%s: tensor %s: shape entry %zu is not a size", file, name, i);
        dims[i] = json_integer_value(x);
    }
    *t = ir_tensor((ir_dtype)d, (int)json_array_size(shape), dims);
    return true;
}

static bool read_manifest(ck_reader *r, json_t *j, const char *file, char *err, size_t errlen)
{
    json_t *fmt = json_object_get(j, "format"), *ver = json_object_get(j, "version");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), CK_FORMAT))
        return ck_fail(err, errlen, "%s: \"format\" is not \"%s\": not an mcc checkpoint", file, CK_FORMAT);
    if (!json_is_integer(ver) || json_integer_value(ver) != CK_VERSION)
        return ck_fail(err, errlen, "%s: unknown manifest version %lld: this mcc reads version %d (save it again with a "
                    "matching mcc)", file, json_is_integer(ver) ? (long long)json_integer_value(ver) : -1LL,
                    CK_VERSION);
    ck_state *s = &r->state;
    int64_t seed = 0, ranks = 0; /* set by get_int before any use: gcc cannot see through the && chain */
    if (!get_int(file, j, "iteration", &s->iteration, err, errlen) ||
        !get_int(file, j, "consumed_samples", &s->consumed_samples, err, errlen) ||
        !get_int(file, j, "steps_applied", &s->steps_applied, err, errlen) ||
        !get_int(file, j, "evals_done", &s->evals_done, err, errlen) || !get_int(file, j, "seed", &seed, err, errlen) ||
        !get_int(file, j, "ranks", &ranks, err, errlen) || !get_axes(file, j, "mesh", s->degree, 1, err, errlen))
        return false;
    derive_axes(s->degree, NULL, 0);
    s->seed = (uint64_t)seed;
    if (ranks < 1 || ranks > 1 << 20)
        return ck_fail(err, errlen, "%s: \"ranks\" is %lld: expected at least 1", file, (long long)ranks);
    s->ranks = (int)ranks;
    json_t *model = json_object_get(j, "model"), *tensors = json_object_get(j, "tensors");
    if (!json_is_object(model) || !json_is_object(tensors))
        return ck_fail(err, errlen, "%s: \"model\" and \"tensors\" must be objects", file);
    s->model = calloc(2 * json_object_size(model) + 1, sizeof *s->model);
    const char *k;
    json_t *v;
    json_object_foreach(model, k, v) {
        s->model[2 * s->nmodel] = strdup(k);
        s->model[2 * s->nmodel++ + 1] = json_is_string(v) ? strdup(json_string_value(v)) : json_dumps(v, JSON_ENCODE_ANY);
    }
    r->tensors = calloc(json_object_size(tensors) + 1, sizeof *r->tensors);
    json_object_foreach(tensors, k, v) {
        ck_tensor *t = &r->tensors[r->ntensors];
        json_t *role = json_object_get(v, "role"), *param = json_object_get(v, "param");
        int ro = -1;
        for (int i = 0; json_is_string(role) && i < CK_NUM_ROLES; i++)
            if (!strcmp(json_string_value(role), ck_role_names[i]))
                ro = i;
        if (ro < 0 || !json_is_string(param))
            return ck_fail(err, errlen, "%s: tensor %s: needs \"role\" (param, adam_m, adam_v, fp8_history) and \"param\"", file, k);
        if (!parse_shape(file, k, v, &t->whole, err, errlen))
            return false;
        t->name = strdup(k);
        t->param = strdup(json_string_value(param));
        t->role = (ck_role)ro;
        r->ntensors++;
    }
    return true;
}

const ck_tensor *ck_find(const ck_reader *r, const char *name)
{
    for (int i = 0; i < r->ntensors; i++)
        if (!strcmp(r->tensors[i].name, name))
            return &r->tensors[i];
    return NULL;
}

/* The hex checksum x (a rank record's "crc32") into *v; false when x is not one. */
static bool parse_checksum(json_t *x, uint64_t *v)
{
    char *end;
    if (!json_is_string(x) || !*json_string_value(x))
        return false;
    *v = strtoull(json_string_value(x), &end, 16);
    return !*end;
}

/* Rank file k: its json, the safetensors file's size against it, its header (and the header's
 * checksum), and each part's layout record against the manifest's whole shape. The parts' bytes
 * are verified when read, each against its own checksum (ck_read_part: a rank reads only the parts
 * it needs); a record without them (an earlier mcc's) has the whole file checked here. */
static bool open_rank(ck_reader *r, int k, char *err, size_t errlen)
{
    char jpath[4400], spath[4400];
    snprintf(jpath, sizeof jpath, "%s/rank_%05d.json", r->dir, k);
    snprintf(spath, sizeof spath, "%s/rank_%05d.safetensors", r->dir, k);
    json_error_t je;
    json_t *j = json_load_file(jpath, 0, &je);
    if (!j && access(jpath, F_OK) != 0)
        return ck_fail(err, errlen, "%s: missing: the checkpoint was saved by %d ranks and rank %d's record is gone", jpath,
                    r->state.ranks, k);
    if (!j)
        return ck_fail(err, errlen, "%s: not valid JSON: %s (line %d)", jpath, je.text, je.line);
    ck_rank_file *rf = &r->rank[k];
    int64_t bytes = 0; /* each read only where `ok` says it was parsed */
    json_t *tensors = json_object_get(j, "tensors"), *head = json_object_get(j, "header_crc32");
    uint64_t sum = 0, head_sum = 0, have = 0, size;
    bool ok = get_int(jpath, j, "bytes", &bytes, err, errlen) && get_axes(jpath, j, "mesh", rf->degree, 1, err, errlen) &&
              get_axes(jpath, j, "coords", rf->coord, 0, err, errlen);
    if (ok)
        derive_axes(rf->degree, rf->coord, k);
    if (ok && (!parse_checksum(json_object_get(j, "crc32"), &sum) || !json_is_object(tensors) ||
               (head && !parse_checksum(head, &head_sum))))
        ok = ck_fail(err, errlen, "%s: needs \"crc32\" (hex), \"tensors\" and, where given, \"header_crc32\" (hex)", jpath);
    if (ok && access(spath, F_OK) != 0)
        ok = ck_fail(err, errlen, "%s: missing: the checkpoint was saved by %d ranks and rank %d's file is gone", spath,
                  r->state.ranks, k);
    struct stat st;
    if (ok && head && stat(spath, &st) != 0)
        ok = ck_fail(err, errlen, "%s: cannot stat: %s", spath, strerror(errno));
    size = ok && head ? (uint64_t)st.st_size : 0;
    ok = ok && (head || ck_checksum_file(spath, &have, &size, err, errlen));
    if (ok && size != (uint64_t)bytes)
        ok = ck_fail(err, errlen, "%s: %llu bytes, but %s says %lld: the file is truncated or was replaced", spath,
                  (unsigned long long)size, jpath, (long long)bytes);
    if (ok && !head && sum != have)
        ok = ck_fail(err, errlen, "%s: checksum mismatch: the file's CRC-32 is %016llx, %s says %016llx: the file is corrupt",
                  spath, (unsigned long long)have, jpath, (unsigned long long)sum);
    ok = ok && ck_st_open(&rf->st, spath, head ? &head_sum : NULL, err, errlen);
    if (ok) {
        rf->layout = calloc((size_t)rf->st.n + 1, sizeof *rf->layout);
        rf->sum = head ? calloc((size_t)rf->st.n + 1, sizeof *rf->sum) : NULL;
    }
    for (int i = 0; ok && i < rf->st.n; i++) {
        const ck_st_entry *e = &rf->st.t[i];
        const ck_tensor *t = ck_find(r, e->name);
        json_t *tj = json_object_get(tensors, e->name), *lj = json_object_get(tj, "layout");
        char lerr[512], ws[96], ps[96], want[96];
        if (!t) {
            ok = ck_fail(err, errlen, "%s: tensor %s is not in the manifest", spath, e->name);
        } else if (!json_is_string(lj) || !ir_parse_layout(json_string_value(lj), &rf->layout[i], lerr, sizeof lerr)) {
            ok = ck_fail(err, errlen, "%s: tensor %s: its layout record is %s", jpath, e->name,
                      json_is_string(lj) ? lerr : "missing");
        } else if (rf->sum && !parse_checksum(json_object_get(tj, "crc32"), &rf->sum[i])) {
            ok = ck_fail(err, errlen, "%s: tensor %s: needs \"crc32\" (hex), as the record's header_crc32 says", jpath,
                         e->name);
        } else {
            ir_type part = ir_layout_block(&rf->layout[i], &t->whole, rf->degree, rf->layout[i].nsplits);
            ir_type_str(&t->whole, ws, sizeof ws);
            ir_type_str(&e->type, ps, sizeof ps);
            ir_type_str(&part, want, sizeof want);
            if (!ir_type_eq(&part, &e->type))
                ok = ck_fail(err, errlen, "%s: tensor %s: its part is %s, but layout [%s] of the whole %s gives %s", spath,
                          e->name, ps, json_string_value(lj), ws, want);
        }
    }
    json_decref(j);
    return ok;
}

bool ck_open(ck_reader *r, const char *dir, int64_t iteration, bool *absent, char *err, size_t errlen)
{
    *r = (ck_reader){0};
    if (absent)
        *absent = false;
    if (iteration < 0) {
        char latest[4200], lerr[4400];
        snprintf(latest, sizeof latest, "%s/%s", dir, CK_LATEST_FILE);
        size_t n;
        char *text = os_read_file(latest, &n, lerr, sizeof lerr);
        if (!text) {
            if (absent)
                *absent = errno == ENOENT;
            return ck_fail(err, errlen, "%s: no checkpoint: %s", dir, lerr);
        }
        char *end;
        iteration = strtoll(text, &end, 10);
        while (*end == '\n' || *end == ' ' || *end == '\r')
            end++;
        bool bad = end == text || *end || iteration < 0;
        free(text);
        if (bad)
            return ck_fail(err, errlen, "%s: expected the iteration number alone (as Megatron writes it)", latest);
    }
    ck_iter_dir(dir, iteration, false, r->dir, sizeof r->dir);
    char path[4400];
    snprintf(path, sizeof path, "%s/manifest.json", r->dir);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) {
        ck_fail(err, errlen, "%s: %s", path, access(path, F_OK) ? "missing: the checkpoint is incomplete (a save that "
             "did not finish) or was removed" : je.text);
        return ck_close(r), false;
    }
    bool ok = read_manifest(r, j, path, err, errlen);
    json_decref(j);
    if (ok && r->state.iteration != iteration)
        ok = ck_fail(err, errlen, "%s: \"iteration\" is %lld, but the directory is iteration %lld's", path,
                  (long long)r->state.iteration, (long long)iteration);
    if (ok)
        r->rank = calloc((size_t)r->state.ranks, sizeof *r->rank);
    for (int k = 0; ok && k < r->state.ranks; k++) {
        r->rank[k].st.fd = -1;
        ok = open_rank(r, k, err, errlen);
    }
    if (!ok)
        ck_close(r);
    return ok;
}

/* Entry i of rank file k into out, verified against its checksum where the record has one. */
static bool read_entry(const ck_reader *r, int k, int i, void *out, char *err, size_t errlen)
{
    const ck_rank_file *rf = &r->rank[k];
    const ck_st_entry *e = &rf->st.t[i];
    if (!ck_st_read(&rf->st, i, out, err, errlen))
        return false;
    uint64_t have = rf->sum ? ck_checksum(CK_CHECKSUM_INIT, out, e->end - e->begin) : 0;
    if (rf->sum && have != rf->sum[i])
        return ck_fail(err, errlen, "%s: checksum mismatch in tensor %s: its bytes' CRC-32 is %016llx, rank_%05d.json "
                       "says %016llx: the file is corrupt", rf->st.path, e->name, (unsigned long long)have, k,
                       (unsigned long long)rf->sum[i]);
    return true;
}

/* The index in the part that the rank at coord holds under layout l of element w of the whole, or
 * -1 where that part does not hold it: ir_layout_index's inverse, from the whole in to the part. */
static int64_t part_index(const ir_layout *l, const ir_type *whole, const int degree[IR_NUM_AXES],
                          const int coord[IR_NUM_AXES], int64_t w)
{
    for (int k = 0; k < l->nsplits; k++) {
        const ir_split *sp = &l->splits[k];
        int64_t offset = ir_layout_offset(l, whole, degree, coord, k);
        ir_type part = ir_layout_block(l, whole, degree, k + 1), block = ir_layout_block(l, whole, degree, k);
        if (sp->kind == IR_SPLIT_FLAT) {
            w -= offset;
            if (w < 0 || w >= ir_numel(&part))
                return -1;
            continue;
        }
        int64_t inner = 1;
        for (int d = sp->dim + 1; d < block.ndim; d++)
            inner *= block.dims[d];
        int64_t j = w % inner, mid = (w / inner) % block.dims[sp->dim] - offset, outer = w / (inner * block.dims[sp->dim]);
        if (mid < 0 || mid >= part.dims[sp->dim])
            return -1;
        w = (outer * part.dims[sp->dim] + mid) * inner + j;
    }
    return w;
}

/* The rank file whose saved part of t (entry[q] in file q; -1: none) holds element w of the whole,
 * trying k first and the others after it (the part that held the last element mostly holds the
 * next), with w's index in that part in *at; -1 when none does. */
static int find_holder(const ck_reader *r, const ck_tensor *t, const int *entry, int k, int64_t w, int64_t *at)
{
    for (int tries = 0; tries < r->state.ranks; tries++, k = (k + 1) % r->state.ranks) {
        const ck_rank_file *rf = &r->rank[k];
        if (entry[k] >= 0 && (*at = part_index(&rf->layout[entry[k]], &t->whole, rf->degree, rf->coord, w)) >= 0)
            return k;
    }
    return -1;
}

/* This rank's part of tensor t into out, element by element from the saved part that holds it:
 * a saved part is read (and verified) the first time one of its elements is wanted, so a rank
 * reads only the parts that overlap its own. */
static bool gather_part(ck_reader *r, const ck_tensor *t, const ir_type *part, const ir_layout *l,
                        const int degree[IR_NUM_AXES], const int coord[IR_NUM_AXES], void *out, char *err, size_t errlen)
{
    int nr = r->state.ranks, *entry = malloc(sizeof *entry * (size_t)nr), k = 0;
    char **saved = calloc((size_t)nr, sizeof *saved);
    for (int q = 0; q < nr; q++)
        entry[q] = ck_st_find(&r->rank[q].st, t->name);
    size_t es = ir_dtype_size(t->whole.dtype);
    bool ok = true;
    for (int64_t i = 0, n = ir_numel(part); ok && i < n; i++) {
        int64_t w = ir_layout_index(l, &t->whole, degree, coord, i), at;
        int holder = find_holder(r, t, entry, k, w, &at);
        if (holder < 0) {
            ok = ck_fail(err, errlen, "%s: tensor %s: no rank file holds its element %lld: a part is missing", r->dir,
                         t->name, (long long)w);
            break;
        }
        k = holder;
        if (!saved[k]) {
            saved[k] = malloc(ir_bytes(&r->rank[k].st.t[entry[k]].type) + 1);
            ok = read_entry(r, k, entry[k], saved[k], err, errlen);
        }
        if (ok)
            memcpy((char *)out + (size_t)i * es, saved[k] + (size_t)at * es, es);
    }
    for (int q = 0; q < nr; q++)
        free(saved[q]);
    free(saved);
    free(entry);
    return ok;
}

void *ck_read_whole(ck_reader *r, const char *name, char *err, size_t errlen)
{
    const ck_tensor *t = ck_find(r, name);
    if (!t)
        return ck_fail(err, errlen, "%s: no tensor %s in the checkpoint", r->dir, name), NULL;
    int degree[IR_NUM_AXES], coord[IR_NUM_AXES] = {0};
    for (int a = 0; a < IR_NUM_AXES; a++)
        degree[a] = 1;
    char *whole = malloc(ir_bytes(&t->whole) + 1);
    if (!gather_part(r, t, &t->whole, &(ir_layout){0}, degree, coord, whole, err, errlen))
        return free(whole), NULL;
    return whole;
}

bool ck_read_part(ck_reader *r, const char *name, const ir_type *part, const ir_layout *l,
                  const int degree[IR_NUM_AXES], const int coord[IR_NUM_AXES], void *out, char *err, size_t errlen)
{
    const ck_tensor *t = ck_find(r, name);
    if (!t)
        return ck_fail(err, errlen, "%s/manifest.json: no tensor %s: the checkpoint is of another model", r->dir, name);
    ir_type mine = ir_layout_block(l, &t->whole, degree, l->nsplits), want = *part;
    ir_shard_clear(&want);
    want.partial = 0;
    if (!ir_type_eq(&mine, &want)) {
        char ws[96], ms[96], ps[96];
        ir_type_str(&t->whole, ws, sizeof ws);
        ir_type_str(&mine, ms, sizeof ms);
        ir_type_str(&want, ps, sizeof ps);
        return ck_fail(err, errlen, "%s/manifest.json: tensor %s is %s in the checkpoint, whose part here is %s, but this "
                    "model's part is %s: the checkpoint is of another model or shape", r->dir, name, ws, ms, ps);
    }
    return gather_part(r, t, part, l, degree, coord, out, err, errlen);
}

void ck_close(ck_reader *r)
{
    for (int k = 0; r->rank && k < r->state.ranks; k++) {
        if (r->rank[k].st.path)
            ck_st_close(&r->rank[k].st);
        free(r->rank[k].layout);
        free(r->rank[k].sum);
    }
    for (int i = 0; i < r->ntensors; i++) {
        free(r->tensors[i].name);
        free(r->tensors[i].param);
    }
    for (int i = 0; i < 2 * r->state.nmodel; i++)
        free(r->state.model[i]);
    free(r->state.model);
    free(r->tensors);
    free(r->rank);
    *r = (ck_reader){0};
}
