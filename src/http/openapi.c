/* openapi: docs/openapi.yaml with this instance's limits (http/openapi.h). */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "http/openapi.h"
#include "http/ui.h"

#define MARK "x-delayq-limits"

/* The value of setting name for cfg (a new reference); NULL when there is none to set (no
 * endpoints), with *unknown 1 when name is not a setting. */
static json_t *setting(const struct config *cfg, const char *name, int *unknown)
{
    if (strcmp(name, "job.max_delay_s") == 0)
        return json_integer(cfg->job.max_delay_s);
    if (strcmp(name, "job.max_delay_ms") == 0)
        return json_integer(cfg->job.max_delay_s * 1000);
    if (strcmp(name, "http.max_batch_jobs") == 0)
        return json_integer(cfg->http.max_batch_jobs);
    if (strcmp(name, "dead.partition_max") == 0)
        return json_integer(cfg->delay.partitions - 1);
    if (strcmp(name, "delay.group_max") == 0)
        return json_integer(cfg->delay.ngroups - 1);
    if (strcmp(name, "topics.not_business") == 0) {   /* {"enum": [".", "..", delay topics,
                                                        * the dead-letter topic]} */
        json_t *names = json_array(), *o = json_object();
        if (!names || !o) {
            json_decref(names);
            json_decref(o);
            return NULL;
        }
        json_array_append_new(names, json_string("."));
        json_array_append_new(names, json_string(".."));
        for (int i = 0; i < cfg->delay.levels.n; i++)
            json_array_append_new(names, json_string(cfg->delay.levels.topic[i]));
        json_array_append_new(names, json_string(cfg->delay.dlq_topic));
        json_object_set_new(o, "enum", names);
        return o;
    }
    if (strcmp(name, "callbacks.endpoints") == 0) {
        json_t *names;
        if (cfg->callbacks.nendpoints == 0 || !(names = json_array()))
            return NULL;   /* none: the description's "not: {}" (no name is one) stays */
        for (int i = 0; i < cfg->callbacks.nendpoints; i++)
            json_array_append_new(names, json_string(cfg->callbacks.endpoints[i].name));
        return names;
    }
    *unknown = 1;
    return NULL;
}

/* Sets the keywords marks names on v: 0, or -1 with err set. */
static int set_marked(const struct config *cfg, json_t *v, json_t *marks, char *err,
                      size_t errlen)
{
    const char *kw;
    json_t *name;

    if (!json_is_object(marks)) {
        snprintf(err, errlen, "openapi: %s must be an object", MARK);
        return -1;
    }
    json_object_foreach(marks, kw, name) {
        int unknown = 0;
        json_t *value = json_is_string(name) ? setting(cfg, json_string_value(name), &unknown)
                                             : NULL;
        if (!json_is_string(name) || unknown) {
            snprintf(err, errlen, "openapi: %s names no setting: %s", MARK,
                     json_is_string(name) ? json_string_value(name) : "(not a string)");
            return -1;
        }
        if (value && json_is_array(value) && strcmp(kw, "enum") == 0)   /* some name is one */
            json_object_del(v, "not");
        if (value)
            json_object_set_new(v, kw, value);
    }
    return 0;
}

/* Sets the marked keywords of v and of everything inside it: 0, or -1 with err set. */
static int apply(const struct config *cfg, json_t *v, char *err, size_t errlen)
{
    const char *key;
    json_t *item, *marks;
    size_t i;

    if (json_is_array(v)) {
        json_array_foreach(v, i, item)
            if (apply(cfg, item, err, errlen) < 0)
                return -1;
        return 0;
    }
    if (!json_is_object(v))
        return 0;
    json_object_foreach(v, key, item)
        if (strcmp(key, MARK) != 0 && apply(cfg, item, err, errlen) < 0)
            return -1;
    /* after the walk: setting a keyword may add a member to v */
    return (marks = json_object_get(v, MARK)) ? set_marked(cfg, v, marks, err, errlen) : 0;
}

char *openapi_build(const struct config *cfg, size_t *len, char *err, size_t errlen)
{
    struct ui_file f;
    json_error_t je;
    json_t *root;
    char *text = NULL;

    if (ui_find(UI_OPENAPI, &f) < 0) {
        snprintf(err, errlen, "openapi: no API description was built in");
        return NULL;
    }
    if (!(root = json_loadb(f.data, f.len, 0, &je))) {
        snprintf(err, errlen, "openapi: the built-in description does not read: %s", je.text);
        return NULL;
    }
    if (apply(cfg, root, err, errlen) == 0 &&
        !(text = json_dumps(root, JSON_COMPACT)))
        snprintf(err, errlen, "openapi: out of memory");
    json_decref(root);
    if (text)
        *len = strlen(text);
    return text;
}
