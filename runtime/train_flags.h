/* train_flags.h — the kinds of train_rank's flags (train_flags.def's kind column): what the value
 * of each is, read by train_rank's parser (train_flags.c) and by mcc compile, which checks and bakes
 * the flags it is given (frontend/main.c). */
#ifndef MCC_TRAIN_FLAGS_H
#define MCC_TRAIN_FLAGS_H

typedef enum {
    TRAIN_FLAG_TEXT,      /* one word */
    TRAIN_FLAG_CHOICE,    /* one of the value's '|'-separated words, kept as its index */
    TRAIN_FLAG_INT,
    TRAIN_FLAG_NUM,
    TRAIN_FLAG_SWITCH,    /* no value: on */
    TRAIN_FLAG_ASYNC_ON,  /* no value: the async setting on, or off */
    TRAIN_FLAG_ASYNC_OFF,
    TRAIN_FLAG_PATHS      /* every value up to the next flag */
} train_flag_kind;

#endif
