/* answer: a request's outcome handed to its caller. The contract is in include/core/answer.h. */
#include "core/answer.h"

void answer_give(answer_fn done, void *opaque, enum answer_is is, int status, int code,
                 const char *message, void *data)
{
    struct answer a = { status, code, is, message ? message : "", data };

    done(opaque, &a);
    api_data_free(data);
}

void answer_send(answer_fn done, void *opaque, int status, int code, const char *message,
                 void *data)
{
    answer_give(done, opaque, answer_is_of(status), status, code, message, data);
}
