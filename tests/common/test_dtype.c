/* tests/common/test_dtype.c - common/dtype.h: the one vocabulary of element
 * types (sizes, names, parsing) that the pipeline, the collectives and
 * train/ share. */
#include <criterion/criterion.h>
#include <string.h>

#include "common/dtype.h"
#include "common/status.h"

Test(common_dtype, sizes_names_and_round_trips)
{
    static const struct {
        sl_dtype t;
        size_t size;
        const char *name;
    } want[] = {
        {SL_DTYPE_F32, 4, "f32"}, {SL_DTYPE_BF16, 2, "bf16"}, {SL_DTYPE_F16, 2, "f16"}};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(sl_dtype_size(want[i].t), want[i].size);
        cr_assert_str_eq(sl_dtype_name(want[i].t), want[i].name);
        sl_dtype back = (sl_dtype)-1;
        cr_assert_eq(sl_dtype_parse(sl_dtype_name(want[i].t), &back), SL_OK);
        cr_assert_eq(back, want[i].t, "%s round trip", want[i].name);
    }
    cr_assert_eq((int)SL_DTYPE_LAST, 2, "a new type needs its size, name and parse here");
}

Test(common_dtype, cli_spellings_and_refusals)
{
    sl_dtype t = SL_DTYPE_BF16;
    cr_assert_eq(sl_dtype_parse("fp32", &t), SL_OK);
    cr_assert_eq(t, SL_DTYPE_F32);
    cr_assert_eq(sl_dtype_parse("fp16", &t), SL_OK);
    cr_assert_eq(t, SL_DTYPE_F16);
    const char *bad[] = {"F32", "bf", "float32", "", "f32 "};
    for (int i = 0; i < 5; i++) {
        t = SL_DTYPE_BF16;
        cr_assert_eq(sl_dtype_parse(bad[i], &t), SL_EINVAL, "'%s'", bad[i]);
        cr_assert_eq(t, SL_DTYPE_BF16, "untouched on error");
        cr_assert(strstr(sl_errmsg(), "sl_dtype_parse"), "%s", sl_errmsg());
    }
    cr_assert_eq(sl_dtype_parse(NULL, &t), SL_EINVAL);
    cr_assert_eq(sl_dtype_size((sl_dtype)7), 0);
    cr_assert_str_eq(sl_dtype_name((sl_dtype)7), "?");
}
